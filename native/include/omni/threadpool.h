// A fixed pool of worker threads, optionally pinned one-to-one to CPUs, for fork-join loops.
//
// The vocoder runs on the CPU beside an accelerator-bound LLM; deployments pin it to the CPUs
// of the device's NUMA node. Pinning that cannot be honoured throws: a silently unpinned pool
// is how a tuned host loses its real-time factor.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace omni {

class ThreadPool {
public:
    // n_threads >= 1. cpus: empty = not pinned (the calling thread then works as worker 0), else
    // exactly n_threads CPU ids, worker i pinned to cpus[i] (the caller only waits, so its own
    // affinity is never changed). Throws InvalidArgument / DeviceError before returning if any
    // worker cannot be pinned.
    ThreadPool(int n_threads, const std::vector<int> & cpus = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool & operator=(const ThreadPool &) = delete;

    int size() const { return n_threads_; }
    const std::vector<int> & cpus() const { return cpus_; }

    // Runs fn(task, worker) for task in [0, n_tasks), spread over the workers; returns when all
    // are done. The first exception thrown by a task is rethrown here (the others are dropped).
    void parallel_for(int n_tasks, const std::function<void(int task, int worker)> & fn);

private:
    void worker_main(int worker);

    void run_tasks(std::unique_lock<std::mutex> & lock, const std::function<void(int, int)> & fn, int worker);

    int n_threads_;
    std::vector<int> cpus_;
    int started_ = 0;
    std::exception_ptr pin_error_;
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::condition_variable work_cv_, done_cv_;
    const std::function<void(int, int)> * job_ = nullptr;
    int n_tasks_ = 0;
    int next_task_ = 0;
    int active_ = 0;
    unsigned generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

// CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

}  // namespace omni
