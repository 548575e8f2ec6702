// Rendezvous of the TTS slots that decode at the same time (docs/slots.md#tts): each slot's
// one-row code step waits until every slot inside a decode loop has submitted its own, and the
// last to arrive (the leader) evaluates them all in one graph; the others (followers) sleep
// until their logits are there. A slot running its callback (Python, maybe blocked on a full
// queue) is away and holds nobody back; a deadline bounds the wait for one that is late.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <vector>

namespace omni {

struct TtsRows;
struct TtsShared;

class TtsBatcher {
public:
    // How long a submitted step waits for the other present slots before it runs with the ones
    // that are there. Only a slot that is late between two steps (descheduled) makes it matter:
    // sampling takes microseconds, a step milliseconds.
    static constexpr std::chrono::milliseconds kDeadline{10};

    void enter();  // the calling slot is in its decode loop: others wait for its steps
    void leave();  // it left the loop or runs its callback: nobody waits for it

    // Evaluates `part` (one slot's rows) in a graph with the parts the other present slots
    // submit meanwhile. Returns when its logits are there; an error of that graph is thrown in
    // every slot that took part.
    void step(TtsShared & w, const TtsRows & part);

private:
    struct Request {
        const TtsRows * part;
        bool done = false;
        std::exception_ptr error;
    };
    void lead(TtsShared & w, std::unique_lock<std::mutex> & lock);

    std::mutex mutex_;
    std::condition_variable changed_;
    int present_ = 0;
    bool running_ = false;
    std::vector<Request *> pending_;
};

// A slot present for a scope (enter ... leave), or away for a scope (leave ... enter) however
// the scope ends; with no batcher, nothing.
class TtsBatchScope {
public:
    TtsBatchScope(TtsBatcher * b, bool away) : b_(b), away_(away) { away_ ? leave() : enter(); }
    ~TtsBatchScope() { away_ ? enter() : leave(); }
    TtsBatchScope(const TtsBatchScope &) = delete;
    TtsBatchScope & operator=(const TtsBatchScope &) = delete;

private:
    void enter() {
        if (b_) b_->enter();
    }
    void leave() {
        if (b_) b_->leave();
    }
    TtsBatcher * b_;
    bool away_;
};

}  // namespace omni
