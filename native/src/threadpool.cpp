#include "omni/threadpool.h"

#include "omni/errors.h"

#include <algorithm>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>

namespace omni {

namespace {

void pin_current_thread(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc != 0) {
        throw DeviceError("cannot pin a vocoder thread to CPU " + std::to_string(cpu) + ": " + std::strerror(rc));
    }
}

}  // namespace

std::vector<int> allowed_cpus() {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) out.push_back(c);
    }
    return out;
}

ThreadPool::ThreadPool(int n_threads, const std::vector<int> & cpus) : n_threads_(n_threads), cpus_(cpus) {
    if (n_threads < 1 || n_threads > 1024) {
        throw InvalidArgument("threads must be in 1..1024, got " + std::to_string(n_threads));
    }
    if (!cpus.empty()) {
        if (static_cast<int>(cpus.size()) != n_threads) {
            throw InvalidArgument("cpus lists " + std::to_string(cpus.size()) + " CPUs for " +
                                  std::to_string(n_threads) + " threads; give one CPU per thread");
        }
        const auto allowed = allowed_cpus();
        for (int c : cpus) {
            if (std::find(allowed.begin(), allowed.end(), c) == allowed.end()) {
                throw DeviceError("CPU " + std::to_string(c) + " is not in this process's affinity mask; "
                                  "pinning cannot be honoured");
            }
        }
        auto sorted = cpus;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
            throw InvalidArgument("cpus lists a CPU twice");
        }
    }
    const int first = cpus_.empty() ? 1 : 0;  // unpinned: the caller is worker 0
    for (int w = first; w < n_threads; ++w) threads_.emplace_back(&ThreadPool::worker_main, this, w);
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return started_ == static_cast<int>(threads_.size()); });
    if (pin_error_) {
        stop_ = true;
        lock.unlock();
        work_cv_.notify_all();
        for (auto & t : threads_) t.join();
        std::rethrow_exception(pin_error_);
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (auto & t : threads_) t.join();
}

void ThreadPool::run_tasks(std::unique_lock<std::mutex> & lock, const std::function<void(int, int)> & fn, int worker) {
    while (next_task_ < n_tasks_) {
        const int task = next_task_++;
        lock.unlock();
        try {
            fn(task, worker);
        } catch (...) {
            lock.lock();
            if (!error_) error_ = std::current_exception();
            next_task_ = n_tasks_;  // stop handing out work
            continue;
        }
        lock.lock();
    }
}

void ThreadPool::worker_main(int worker) {
    std::exception_ptr err;
    if (!cpus_.empty()) {
        try {
            pin_current_thread(cpus_[worker]);
        } catch (...) {
            err = std::current_exception();
        }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (err && !pin_error_) pin_error_ = err;
    ++started_;
    done_cv_.notify_all();
    unsigned seen = generation_;
    for (;;) {
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        run_tasks(lock, *job_, worker);
        if (--active_ == 0) done_cv_.notify_all();
    }
}

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int, int)> & fn) {
    if (n_tasks <= 0) return;
    const bool caller_works = cpus_.empty();
    if (threads_.empty()) {  // one unpinned thread: run inline
        for (int t = 0; t < n_tasks; ++t) fn(t, 0);
        return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_task_ = 0;
    active_ = static_cast<int>(threads_.size());
    error_ = nullptr;
    ++generation_;
    work_cv_.notify_all();
    if (caller_works) run_tasks(lock, fn, 0);
    done_cv_.wait(lock, [&] { return active_ == 0; });
    job_ = nullptr;
    if (error_) {
        auto e = error_;
        error_ = nullptr;
        std::rethrow_exception(e);
    }
}

}  // namespace omni
