// The simplex speech-code sampler (omni/tts.h).
#include "omni/errors.h"
#include "omni/tts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace omni {

TtsSampler::TtsSampler(const TtsSamplerOptions & o) : o_(o), rng_(o.seed) {
    if (!(o.repetition_penalty > 0.0f)) throw InvalidArgument("repetition_penalty must be > 0");
    if (o.window < 0) throw InvalidArgument("window must be >= 0");
}

void TtsSampler::reset() { history_.clear(); }

int TtsSampler::sample(std::vector<float> logits) {
    const int V = static_cast<int>(logits.size());
    if (V == 0) throw InvalidArgument("no logits");
    if (!history_.empty() && o_.repetition_penalty != 1.0f) {  // not on the first token of a turn
        const size_t from = history_.size() > static_cast<size_t>(o_.window) ? history_.size() - o_.window : 0;
        std::vector<int> count(V, 0);
        for (size_t i = from; i < history_.size(); ++i) ++count[history_[i]];
        for (int c = 0; c < V; ++c) {
            if (!count[c]) continue;
            const float alpha = o_.count_penalty ? std::pow(o_.repetition_penalty, static_cast<float>(count[c]))
                                                 : o_.repetition_penalty;
            logits[c] = logits[c] >= 0.0f ? logits[c] / alpha : logits[c] * alpha;
        }
    }
    int chosen;
    if (o_.temperature <= 0.0f) {
        chosen = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
        std::vector<int> idx(V);
        std::iota(idx.begin(), idx.end(), 0);
        const float mx = *std::max_element(logits.begin(), logits.end());
        std::vector<double> prob(V);
        for (int c = 0; c < V; ++c) prob[c] = std::exp(static_cast<double>((logits[c] - mx) / o_.temperature));
        if (o_.top_k > 0 || o_.top_p < 1.0f) {
            std::sort(idx.begin(), idx.end(), [&](int a, int b) { return prob[a] > prob[b]; });
            int k = o_.top_k > 0 ? std::min(V, o_.top_k) : V;
            if (o_.top_p_first) k = std::max(k, std::min(V, 3));  // its top-k keeps 3 as well
            // the nucleus's mass is measured over the top-k (llama.cpp-omni) or over all (reference)
            const int pool = o_.top_p_first ? V : k;
            double total = 0;
            for (int i = 0; i < pool; ++i) total += prob[idx[i]];
            double acc = 0;
            int n = 0;
            while (n < pool && (n < 3 || acc < o_.top_p * total)) acc += prob[idx[n++]];
            n = std::min(n, k);
            for (int i = n; i < V; ++i) prob[idx[i]] = 0.0;
        }
        double total = std::accumulate(prob.begin(), prob.end(), 0.0);
        std::uniform_real_distribution<double> u(0.0, total);
        double r = u(rng_), acc = 0.0;
        chosen = V - 1;
        for (int c = 0; c < V; ++c) {
            acc += prob[c];
            if (r < acc) {
                chosen = c;
                break;
            }
        }
    }
    history_.push_back(chosen);
    return chosen;
}

}  // namespace omni
