#include "omni/threadpool.h"

#include "omni/errors.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <pthread.h>
#include <sched.h>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define OMNI_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define OMNI_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define OMNI_CPU_RELAX() std::this_thread::yield()
#endif

namespace omni {

namespace {

constexpr int kGenBits = 24, kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;

uint64_t pack(uint64_t gen, uint64_t n, uint64_t next) { return (gen << (2 * kCountBits)) | (n << kCountBits) | next; }
uint64_t gen_of(uint64_t t) { return t >> (2 * kCountBits); }
int n_of(uint64_t t) { return static_cast<int>((t >> kCountBits) & kCountMask); }
int next_of(uint64_t t) { return static_cast<int>(t & kCountMask); }

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

ThreadPool::ThreadPool(int n_threads, const std::vector<int> & cpus, int spin_us)
    : n_threads_(n_threads), cpus_(cpus), spin_us_(spin_us) {
    if (n_threads < 1 || n_threads > 1024) {
        throw InvalidArgument("threads must be in 1..1024, got " + std::to_string(n_threads));
    }
    if (spin_us < 0 || spin_us > 100000) throw InvalidArgument("spin_us must be in 0..100000");
    if (!cpus.empty()) {
        if (static_cast<int>(cpus.size()) != n_threads) {
            throw InvalidArgument("cpus lists " + std::to_string(cpus.size()) + " CPUs for " +
                                  std::to_string(n_threads) + " threads; give one CPU per thread");
        }
        const auto allowed = allowed_cpus();
        for (int c : cpus) {
            if (std::find(allowed.begin(), allowed.end(), c) == allowed.end()) {
                throw DeviceError("CPU " + std::to_string(c) +
                                  " is not in this process's affinity mask; "
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

bool ThreadPool::spin_until(const std::function<bool()> & ready) const {
    if (ready()) return true;
    if (spin_us_ == 0) return false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            OMNI_CPU_RELAX();
            if (ready()) return true;
        }
        if (std::chrono::steady_clock::now() >= until) return false;
    }
}

void ThreadPool::run_tasks(uint64_t generation, int worker) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
        if (gen_of(t) != generation || next_of(t) >= n_of(t)) return;
        if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // The task is ours; the loop (and job_) lives until it is counted done.
        const int task = next_of(t), n = n_of(t);
        if (!failed_.load(std::memory_order_relaxed)) {
            try {
                (*job_)(task, worker);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex_);
                if (!error_) error_ = std::current_exception();
                failed_ = true;
            }
        }
        if (worker == 0 && cpus_.empty()) caller_tasks_.fetch_add(1, std::memory_order_relaxed);
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
            std::lock_guard<std::mutex> lock(mutex_);  // the caller checks done_ under this lock
            done_cv_.notify_all();
        }
        t = ticket_.load(std::memory_order_acquire);
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
    uint64_t seen = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (err && !pin_error_) pin_error_ = err;
        ++started_;
        seen = gen_of(ticket_.load());
        done_cv_.notify_all();
    }
    auto fresh = [&] {
        return stop_.load(std::memory_order_acquire) || gen_of(ticket_.load(std::memory_order_acquire)) != seen;
    };
    for (;;) {
        if (!spin_until(fresh)) {
            std::unique_lock<std::mutex> lock(mutex_);
            ++sleepers_;
            work_cv_.wait(lock, fresh);
            --sleepers_;
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = gen_of(ticket_.load(std::memory_order_acquire));
        run_tasks(seen, worker);
    }
}

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int, int)> & fn) {
    if (n_tasks <= 0) return;
    if (n_tasks > kMaxTasks) throw InvalidArgument("parallel_for: at most " + std::to_string(kMaxTasks) + " tasks");
    std::lock_guard<std::mutex> call(call_mutex_);
    loops_.fetch_add(1, std::memory_order_relaxed);
    tasks_.fetch_add(n_tasks, std::memory_order_relaxed);
    if (threads_.empty()) {  // one unpinned thread: run inline
        caller_tasks_.fetch_add(n_tasks, std::memory_order_relaxed);
        for (int t = 0; t < n_tasks; ++t) fn(t, 0);
        return;
    }
    job_ = &fn;
    failed_.store(false, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    generation_ = (generation_ + 1) & ((uint64_t{1} << kGenBits) - 1);
    const uint64_t gen = generation_;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = nullptr;
        ticket_.store(pack(gen, static_cast<uint64_t>(n_tasks), 0), std::memory_order_release);
        if (sleepers_ > 0) work_cv_.notify_all();
    }
    if (cpus_.empty()) run_tasks(gen, 0);
    auto finished = [&] { return done_.load(std::memory_order_acquire) == n_tasks; };
    if (!spin_until(finished)) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_cv_.wait(lock, finished);
    }
    job_ = nullptr;
    std::exception_ptr e;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        std::swap(e, error_);
    }
    if (e) std::rethrow_exception(e);
}

ThreadPool::Stats ThreadPool::stats() const { return Stats{loops_.load(), tasks_.load(), caller_tasks_.load()}; }

}  // namespace omni
