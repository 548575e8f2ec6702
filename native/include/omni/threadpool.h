// A fixed pool of worker threads, optionally pinned one-to-one to CPUs, for fork-join loops.
//
// The vocoder runs on the CPU beside an accelerator-bound LLM; deployments pin it to the CPUs
// of the device's NUMA node. Pinning that cannot be honoured throws: a silently unpinned pool
// is how a tuned host loses its real-time factor.
//
// Built for shared cores (docs/performance.md, "CPU contention"): tasks are handed out one at a
// time, so a worker the OS has descheduled simply takes fewer of them, and a loop ends when its
// tasks are done -- it never waits for a worker that got none. Idle threads spin for a few
// microseconds, then sleep on a condition variable, leaving the core to whoever needs it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace omni {

class ThreadPool {
public:
    static constexpr int kMaxTasks = (1 << 20) - 1;  // per parallel_for
    static constexpr int kDefaultSpinMicros = 20;

    // n_threads >= 1. cpus: empty = not pinned (the calling thread then works as worker 0), else
    // exactly n_threads CPU ids, worker i pinned to cpus[i] (the caller only waits, so its own
    // affinity is never changed). Throws InvalidArgument / DeviceError before returning if any
    // worker cannot be pinned. spin_us: how long an idle thread polls before it sleeps.
    ThreadPool(int n_threads, const std::vector<int> & cpus = {}, int spin_us = kDefaultSpinMicros);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool & operator=(const ThreadPool &) = delete;

    int size() const { return n_threads_; }
    const std::vector<int> & cpus() const { return cpus_; }

    // Runs fn(task, worker) for task in [0, n_tasks), spread over the workers; returns when all
    // are done. The first exception thrown by a task is rethrown here (later tasks are skipped).
    // Calls from several threads are serialised.
    void parallel_for(int n_tasks, const std::function<void(int task, int worker)> & fn);

    // Loops run so far and, of their tasks, how many the calling thread ran (unpinned pools).
    struct Stats {
        uint64_t loops = 0, tasks = 0, caller_tasks = 0;
    };
    Stats stats() const;

private:
    void worker_main(int worker);
    void run_tasks(uint64_t generation, int worker);
    bool spin_until(const std::function<bool()> & ready) const;

    int n_threads_;
    std::vector<int> cpus_;
    int spin_us_;
    std::vector<std::thread> threads_;
    std::mutex call_mutex_;  // one loop at a time

    // The current loop: generation (24 bits) | n_tasks (20 bits) | next task (20 bits). A task
    // is taken by a compare-exchange on this word, so a late worker can never take a task of
    // another loop; the loop's function stays valid until all of its tasks are done.
    std::atomic<uint64_t> ticket_{0};
    std::atomic<int> done_{0};
    std::atomic<bool> failed_{false};
    std::atomic<bool> stop_{false};
    const std::function<void(int, int)> * job_ = nullptr;
    uint64_t generation_ = 0;

    std::mutex mutex_;  // guards sleeping, start-up and the first error
    std::condition_variable work_cv_, done_cv_;
    int sleepers_ = 0, started_ = 0;
    std::exception_ptr pin_error_, error_;
    std::atomic<uint64_t> loops_{0}, tasks_{0}, caller_tasks_{0};
};

// CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

}  // namespace omni
