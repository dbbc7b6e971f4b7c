// The training loop's validation (validation.h).
#include "xf/trainer/validation.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "xf/metrics.h"
#include "xf/trainer/translate.h"

namespace xf::trainer {

ValidationSet load_validation_set(const TrainOptions& options, const Tokenizer& tokenizer,
                                  const CorpusLanguages& languages) {
  ValidationSet set;
  std::vector<TextPair> pairs = read_parallel_corpus(options.dev_path, languages);
  TokenizedCorpus all = tokenize_corpus(pairs, tokenizer);
  // Pairs the model or a batch cannot take are left out of the loss.
  const size_t longest = static_cast<size_t>(
      std::min<int64_t>(options.max_positions - 1, options.batch_tokens - 1));
  set.corpus = filter_by_length(all, longest);
  // BLEU against every reference of a source (the dev set repeats sources with other
  // translations), over the first N distinct sources.
  std::unordered_map<std::string, size_t> index_of_source;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const size_t source_length = all.source_length(i);
    if (source_length == 0 || source_length + 1 >= options.max_positions) continue;
    auto found = index_of_source.find(pairs[i].source);
    if (found != index_of_source.end()) {
      set.bleu_references[found->second].push_back(pairs[i].target);
      continue;
    }
    if (static_cast<int64_t>(set.bleu_sources.size()) >= options.valid_bleu_sentences) continue;
    index_of_source[pairs[i].source] = set.bleu_sources.size();
    set.bleu_sources.emplace_back(all.source(i), all.source(i) + all.source_length(i));
    set.bleu_references.push_back({pairs[i].target});
  }
  return set;
}

ValidationResult validate(TransformerModel& model, const ValidationSet& set,
                          const Tokenizer& tokenizer, const TrainOptions& options,
                          Communicator& ranks) {
  ValidationResult result;
  const ModelConfig& config = model.config();
  const size_t rank = static_cast<size_t>(ranks.rank()), rank_count = static_cast<size_t>(ranks.size());
  double nll = 0;
  int64_t tokens = 0;
  const std::vector<BatchIndices> loss_batches =
      plan_batches(set.corpus, static_cast<size_t>(options.batch_tokens), 0, 0, /*shuffle=*/false);
  for (size_t b = rank; b < loss_batches.size(); b += rank_count) {
    const BatchIndices& indices = loss_batches[b];
    std::vector<std::vector<int32_t>> sources, targets;
    for (uint32_t i : indices) {
      sources.emplace_back(set.corpus.source(i), set.corpus.source(i) + set.corpus.source_length(i));
      targets.emplace_back(set.corpus.target(i), set.corpus.target(i) + set.corpus.target_length(i));
    }
    LossSums sums = model.evaluate(make_batch(config, sources, targets));
    nll += sums.nll_sum;
    tokens += sums.token_count;
  }
  metrics::BleuStats bleu;
  const size_t chunk = 32;
  std::vector<size_t> mine;  // this rank's sentences
  for (size_t start = rank * chunk; start < set.bleu_sources.size(); start += rank_count * chunk) {
    for (size_t i = start; i < std::min(set.bleu_sources.size(), start + chunk); ++i) mine.push_back(i);
  }
  std::vector<std::vector<int32_t>> sources;
  for (size_t i : mine) sources.push_back(set.bleu_sources[i]);
  const auto translations = translate_greedy(config, model.parameters(), model.parameter_count(),
                                             sources, options.threads);
  for (size_t k = 0; k < mine.size(); ++k) {
    bleu += metrics::bleu_sentence_stats(tokenizer.decode(translations[k]),
                                         set.bleu_references[mine[k]]);
  }
  // Counts below 2^53 add exactly in double.
  std::vector<double> sums = {nll, static_cast<double>(tokens), static_cast<double>(bleu.hyp_len),
                              static_cast<double>(bleu.ref_len)};
  for (int n = 0; n < metrics::kBleuMaxOrder; ++n) {
    sums.push_back(static_cast<double>(bleu.correct[n]));
    sums.push_back(static_cast<double>(bleu.total[n]));
  }
  ranks.all_reduce_sum(sums.data(), sums.size());
  bleu.hyp_len = static_cast<int64_t>(sums[2]);
  bleu.ref_len = static_cast<int64_t>(sums[3]);
  for (int n = 0; n < metrics::kBleuMaxOrder; ++n) {
    bleu.correct[n] = static_cast<int64_t>(sums[4 + 2 * n]);
    bleu.total[n] = static_cast<int64_t>(sums[5 + 2 * n]);
  }
  result.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  if (!set.bleu_sources.empty()) result.bleu = metrics::bleu_from_stats(bleu).score;
  return result;
}

bool record_validation(TrainingProgress& state, const ValidationResult& result,
                       const std::string& best_by) {
  state.last_valid_loss = result.loss;
  state.last_valid_bleu = result.bleu;
  const bool improved = !state.has_best || (best_by == "bleu" ? result.bleu > state.best_valid_bleu
                                                              : result.loss < state.best_valid_loss);
  if (improved) {
    state.has_best = true;
    state.best_valid_loss = result.loss;
    state.best_valid_bleu = result.bleu;
    state.validations_without_improvement = 0;
  } else {
    ++state.validations_without_improvement;
  }
  return improved;
}

void Validator::run(double epoch) {
  if (!dev_) return;
  model_.sync_host();
  const ValidationResult result = validate(*model_.host, *dev_, tokenizer_, options_, ranks_);
  last_validated_step_ = state_.step;
  const bool improved = record_validation(state_, result, options_.best_by);
  if (improved) checkpoints_.save_best();
  log_.validation(state_.step, epoch, result.loss, result.bleu, improved, state_.elapsed_seconds);
}

}  // namespace xf::trainer
