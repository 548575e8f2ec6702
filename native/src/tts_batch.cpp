#include "tts_batch.h"

#include "tts_shared.h"

#include <algorithm>

namespace omni {

void TtsBatcher::enter() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++present_;
}

void TtsBatcher::leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    --present_;
    changed_.notify_all();  // the waiting slots may now be all the present ones
}

void TtsBatcher::step(TtsShared & w, const TtsRows & part) {
    Request mine{&part};
    std::unique_lock<std::mutex> lock(mutex_);
    pending_.push_back(&mine);
    changed_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!mine.done) {
        if (!running_) {
            const bool everyone = static_cast<int>(pending_.size()) >= present_;
            const bool late = std::chrono::steady_clock::now() >= deadline;
            if (everyone || late) {
                lead(w, lock);
                continue;
            }
            changed_.wait_until(lock, deadline);
        } else {
            changed_.wait(lock);  // the running graph ends with a notify
        }
    }
    if (mine.error) std::rethrow_exception(mine.error);
}

void TtsBatcher::lead(TtsShared & w, std::unique_lock<std::mutex> & lock) {
    std::vector<Request *> batch;
    batch.swap(pending_);
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
        std::vector<TtsRows> parts;
        parts.reserve(batch.size());
        for (const Request * r : batch) parts.push_back(*r->part);
        evaluate_rows(w, parts);
        ++w.step_graphs;
        w.step_rows += static_cast<int64_t>(parts.size());
    } catch (...) {
        error = std::current_exception();
    }
    lock.lock();
    for (Request * r : batch) {
        r->error = error;
        r->done = true;
    }
    running_ = false;
    changed_.notify_all();
}

}  // namespace omni
