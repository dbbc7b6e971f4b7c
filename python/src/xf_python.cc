// xf._xf: the runtime's Translator for Python (nanobind). The Python side (xf/__init__.py)
// wraps the tuples returned here into TranslationResult objects.
//
// Sources are text (str) or SentencePiece pieces (a list of str); both become ids here, with the
// GIL held; translation runs with the GIL released, one call at a time per Translator. Of a text,
// only the head the plan can use is copied and tokenized (memory does not grow with a text).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <pthread.h>
#include <signal.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/model.h"
#include "xf/sentences.h"
#include "xf/translator.h"

namespace nb = nanobind;

namespace {

// Python handles SIGINT, and a handler runs on whichever thread the kernel picks: one that
// interrupts a thread inside oneDNN 2.6's AVX-512 GEMM corrupts the heap (that GEMM points the
// stack pointer at heap memory: oneDNN issue 4845). While xf computes, the calling thread blocks
// the asynchronous signals, and the OpenMP workers it starts inherit the block for good; a
// signal that comes meanwhile waits for the call's end (Ctrl-C: KeyboardInterrupt then).
class AsynchronousSignalsBlocked {
 public:
  AsynchronousSignalsBlocked() {
    sigset_t signals;
    sigfillset(&signals);
    for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&signals, fault);
    pthread_sigmask(SIG_BLOCK, &signals, &previous_);
  }
  ~AsynchronousSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  AsynchronousSignalsBlocked(const AsynchronousSignalsBlocked&) = delete;
  AsynchronousSignalsBlocked& operator=(const AsynchronousSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

// The UTF-8 bytes of a str, at most max_bytes of them (cut at a character boundary when
// longer; *cut says so): of a huge text only the head the plan can use is copied. The first
// max_bytes characters hold at least max_bytes bytes, so only those are encoded.
std::string utf8(nb::handle str, const char* what, size_t index, size_t max_bytes, bool* cut) {
  const Py_ssize_t characters = PyUnicode_GetLength(str.ptr());
  nb::object head = nb::borrow(str);
  *cut = false;
  if (characters > 0 && static_cast<size_t>(characters) > max_bytes) {
    head = nb::steal(PyUnicode_Substring(str.ptr(), 0, static_cast<Py_ssize_t>(max_bytes)));
    if (!head.is_valid()) throw nb::python_error();
    *cut = true;
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(head.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    throw nb::value_error((std::string(what) + "[" + std::to_string(index) +
                           "] is not valid Unicode text (invalid UTF-8: a lone surrogate)").c_str());
  }
  size_t bytes = static_cast<size_t>(size);
  if (bytes > max_bytes) {
    bytes = max_bytes;
    while (bytes > 0 && (static_cast<unsigned char>(data[bytes]) & 0xC0) == 0x80) --bytes;
    *cut = true;
  }
  return std::string(data, bytes);
}

// One source or target: text (its head, `cut` when longer), or a list of pieces. Throws
// nb::type_error for anything else.
struct Input {
  bool is_text = true;
  bool cut = false;
  std::string text;
  std::vector<std::string> pieces;
};

Input read_input(nb::handle item, const char* what, size_t index, size_t max_bytes) {
  Input input;
  if (nb::isinstance<nb::str>(item)) {
    input.text = utf8(item, what, index, max_bytes, &input.cut);
    return input;
  }
  if (nb::isinstance<nb::list>(item) || nb::isinstance<nb::tuple>(item)) {
    input.is_text = false;
    for (nb::handle piece : item) {
      if (!nb::isinstance<nb::str>(piece))
        throw nb::type_error((std::string(what) + "[" + std::to_string(index) +
                              "] must be a str or a list of str pieces, found a " +
                              nb::type_name(piece.type()).c_str() + " in the list").c_str());
      bool cut = false;
      input.pieces.push_back(utf8(piece, what, index, max_bytes, &cut));
    }
    return input;
  }
  throw nb::type_error((std::string(what) + "[" + std::to_string(index) + "] must be a str or a list of str pieces, got " +
                        nb::type_name(item.type()).c_str()).c_str());
}

std::vector<Input> read_inputs(nb::handle sequence, const char* what, size_t max_bytes) {
  if (nb::isinstance<nb::str>(sequence) || !(nb::isinstance<nb::list>(sequence) || nb::isinstance<nb::tuple>(sequence)))
    throw nb::type_error((std::string(what) + " must be a list of str or of lists of str pieces, got " +
                          nb::type_name(sequence.type()).c_str()).c_str());
  std::vector<Input> inputs;
  size_t index = 0;
  for (nb::handle item : sequence) inputs.push_back(read_input(item, what, index++, max_bytes));
  return inputs;
}

class PyTranslator {
 public:
  PyTranslator(const std::string& model_path, const std::string& device, int max_batch, int max_beam,
               int threads, int max_source_len, std::optional<std::string> weight_dtype, float max_len_a,
               int max_len_b, const std::string& shortlist, int shortlist_first, int shortlist_best,
               float shortlist_threshold) {
    xf::TranslatorOptions options;
    options.device = xf::parse_device(device);
    options.max_batch = max_batch;
    options.max_beam = max_beam;
    options.threads = threads;
    options.max_source_len = max_source_len;
    if (weight_dtype) options.weight_dtype = xf::parse_dtype(*weight_dtype);
    options.max_len_a = max_len_a;
    options.max_len_b = max_len_b;
    options.shortlist = shortlist;
    options.shortlist_first = shortlist_first;
    options.shortlist_best = shortlist_best;
    options.shortlist_threshold = shortlist_threshold;
    nb::gil_scoped_release released;  // loading and packing the weights takes a while
    AsynchronousSignalsBlocked blocked;
    model_ = xf::Model::open(model_path);
    translator_ = std::make_unique<xf::Translator>(model_, options);
  }

  // Returns (results, truncated): per source (is_text, texts, pieces, ids, scores, log_probs)
  // over its hypotheses; the indices of the sources cut to max_input_length tokens (0: none).
  // callback: None, or called as callback(index, sentence, token_id, piece, length) from the
  // translating thread (the GIL taken for it) with each streamed token, piece None at the end.
  nb::tuple translate(nb::handle source, nb::handle target_prefix, const xf::TranslateOptions& given_options,
                      int max_input_length, nb::object callback) {
    xf::TranslateOptions options = given_options;
    if (!callback.is_none())
      options.callback = [this, callback](const xf::StreamStep& step) {
        const std::string piece = step.id >= 0 ? model_->target_pieces(&step.id, 1)[0] : std::string();
        nb::gil_scoped_acquire gil;
        if (step.id >= 0) callback(step.index, step.sentence, step.id, piece, step.length);
        else callback(step.index, step.sentence, step.id, nb::none(), step.length);
      };
    const std::vector<Input> sources = read_inputs(source, "source", source_bytes());
    std::vector<Input> prefixes;
    if (!target_prefix.is_none()) {
      prefixes = read_inputs(target_prefix, "target_prefix", target_bytes());
      if (prefixes.size() != sources.size())
        throw xf::Error("target_prefix has " + std::to_string(prefixes.size()) + " entries for " +
                        std::to_string(sources.size()) + " sources");
    }
    // Texts are paragraphs split into sentences (unless disabled); pieces are one sentence each.
    std::vector<std::string> texts(sources.size());
    std::vector<bool> split(sources.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      texts[i] = sources[i].text;
      split[i] = sources[i].is_text && !options.disable_sentence_splitting;
    }
    std::vector<xf::TranslationResult> results;
    std::vector<size_t> truncated;
    {
      nb::gil_scoped_release released;
      AsynchronousSignalsBlocked blocked;
      std::lock_guard<std::mutex> lock(mutex_);  // after releasing the GIL: no lock-order cycle
      const xf::Paragraphs paragraphs(texts, split);
      const size_t count = paragraphs.sentences().size();
      std::vector<std::vector<int32_t>> ids(count), prefix_ids(prefixes.empty() ? 0 : count);
      for (size_t i = 0; i < sources.size(); ++i) {
        try {
          for (size_t k = 0; k < paragraphs.count(i); ++k) {
            const size_t j = paragraphs.first(i) + k;
            Input sentence = sources[i];
            if (sentence.is_text) {
              sentence.text = paragraphs.sentences()[j];
              sentence.cut = sources[i].cut && k + 1 == paragraphs.count(i);  // the text's cut tail
            }
            const size_t before = truncated.size();
            ids[j] = source_ids(sentence, max_input_length, i, truncated);
            if (truncated.size() > before && before > 0 && truncated[before - 1] == i) truncated.pop_back();
          }
          if (!prefixes.empty()) prefix_ids[paragraphs.first(i)] = target_ids(prefixes[i], "target prefix");
        } catch (const xf::Error& e) {
          throw xf::Error("sentence " + std::to_string(i + 1) + ": " + e.what());
        }
      }
      std::vector<xf::TokenTranslation> sentences;
      translator_->translate_ids(ids, options, sentences, prefix_ids);
      results = xf::join_translations(*model_, paragraphs, sentences);
    }
    nb::list out;
    for (size_t i = 0; i < sources.size(); ++i) {
      nb::list texts_out, pieces, ids, scores, log_probs;
      for (const xf::Hypothesis& h : results[i].hypotheses) {
        texts_out.append(h.text);
        pieces.append(nb::cast(model_->target_pieces(h.ids.data(), h.ids.size())));
        ids.append(nb::cast(h.ids));
        scores.append(h.score);
        log_probs.append(h.log_prob);
      }
      out.append(nb::make_tuple(sources[i].is_text, texts_out, pieces, ids, scores, log_probs));
    }
    return nb::make_tuple(out, nb::cast(truncated));
  }

  // Returns (results, truncated): per pair (pieces with "</s>" last, ids, log_probs).
  nb::tuple score(nb::handle source, nb::handle target, const xf::TranslateOptions& options, int max_input_length) {
    const std::vector<Input> sources = read_inputs(source, "source", source_bytes());
    const std::vector<Input> targets = read_inputs(target, "target", target_bytes());
    if (targets.size() != sources.size())
      throw xf::Error("target has " + std::to_string(targets.size()) + " entries for " +
                      std::to_string(sources.size()) + " sources");
    std::vector<xf::ScoringResult> results;
    std::vector<size_t> truncated;
    {
      nb::gil_scoped_release released;
      AsynchronousSignalsBlocked blocked;
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<std::vector<int32_t>> ids(sources.size()), target_lists(targets.size());
      for (size_t i = 0; i < sources.size(); ++i) {
        try {
          ids[i] = source_ids(sources[i], max_input_length, i, truncated);
          target_lists[i] = target_ids(targets[i], "target");
        } catch (const xf::Error& e) {
          throw xf::Error("sentence " + std::to_string(i + 1) + ": " + e.what());
        }
      }
      translator_->score_ids(ids, target_lists, options, results);
    }
    nb::list out;
    for (const xf::ScoringResult& r : results) {
      std::vector<std::string> pieces = model_->target_pieces(r.ids.data(), r.ids.size() - 1);
      pieces.emplace_back("</s>");
      out.append(nb::make_tuple(nb::cast(pieces), nb::cast(r.ids), nb::cast(r.log_probs)));
    }
    return nb::make_tuple(out, nb::cast(truncated));
  }

  // The model's SentencePiece pieces of a source text (what translate() accepts as a list).
  std::vector<std::string> tokenize(const std::string& text) const {
    const std::vector<int32_t> ids = model_->encode_source(text);
    return model_->source_pieces(ids.data(), ids.size());
  }

  // The model's decoding settings (its decoding.* metadata, else xf's defaults) by name.
  nb::dict decoding_defaults() const {
    const xf::DecodingDefaults& d = model_->decoding_defaults();
    nb::dict out;
    out["beam_size"] = d.beam;
    out["length_penalty"] = d.length_penalty;
    out["length_normalization"] = xf::length_normalization_name(d.length_normalization);
    out["max_decoding_length"] = d.max_decoding_length;
    out["repetition_penalty"] = d.repetition_penalty;
    out["no_repeat_ngram_size"] = d.no_repeat_ngram_size;
    out["allow_unk"] = d.allow_unk;
    return out;
  }

  const xf::TranslatorOptions& options() const { return translator_->options(); }
  int64_t max_target_len() const { return translator_->max_target_len(); }

 private:
  size_t source_bytes() const { return model_->source_bytes_for(static_cast<size_t>(options().max_source_len)); }
  size_t target_bytes() const { return model_->source_bytes_for(static_cast<size_t>(translator_->max_target_len())); }

  // A source's ids: at most max_source_len - 1 of them are read (a longer source is an error),
  // or max_input_length when that is smaller (0: no truncation), and then a longer one is cut
  // to it, its index added to `truncated`.
  std::vector<int32_t> source_ids(const Input& input, int max_input_length, size_t index,
                                  std::vector<size_t>& truncated) const {
    const size_t plan_limit = static_cast<size_t>(options().max_source_len - 1);
    const bool truncating = max_input_length > 0 && static_cast<size_t>(max_input_length) <= plan_limit;
    const size_t limit = truncating ? static_cast<size_t>(max_input_length) : plan_limit;
    bool longer = false;
    std::vector<int32_t> ids;
    if (input.is_text) {
      ids = model_->encode_source(input.text, limit, &longer);
      longer |= input.cut;
    } else {
      ids = model_->source_piece_ids(input.pieces);
      longer = ids.size() > limit;
      if (longer) ids.resize(limit);
    }
    if (!longer) return ids;
    if (!truncating)
      throw xf::Error("more than the translator's max_source_len " + std::to_string(options().max_source_len) +
                      " tokens with EOS");
    truncated.push_back(index);
    return ids;
  }

  std::vector<int32_t> target_ids(const Input& input, const char* what) const {
    if (input.cut)
      throw xf::Error(std::string("the ") + what + " is longer than the translator's longest output of " +
                      std::to_string(max_target_len()) + " tokens");
    return input.is_text ? model_->encode_target(input.text) : model_->target_piece_ids(input.pieces);
  }

  std::shared_ptr<const xf::Model> model_;
  std::unique_ptr<xf::Translator> translator_;
  std::mutex mutex_;  // a Translator translates one call at a time
};

}  // namespace

NB_MODULE(_xf, m) {
  m.doc() = "xf runtime bindings (use the xf package)";
  nb::exception<xf::Error>(m, "Error", PyExc_RuntimeError);

  nb::class_<xf::TranslateOptions>(m, "TranslateOptions")
      .def(nb::init<>())
      .def_rw("beam", &xf::TranslateOptions::beam)
      .def_rw("n_best", &xf::TranslateOptions::n_best)
      .def_rw("length_penalty", &xf::TranslateOptions::length_penalty)
      .def_prop_rw(
          "length_normalization",
          [](const xf::TranslateOptions& o) -> std::optional<std::string> {
            if (!o.length_normalization) return std::nullopt;
            return std::string(xf::length_normalization_name(*o.length_normalization));
          },
          [](xf::TranslateOptions& o, const std::optional<std::string>& name) {
            if (name) o.length_normalization = xf::parse_length_normalization(*name);
            else o.length_normalization.reset();
          }, nb::arg("name").none())
      .def_rw("max_len_a", &xf::TranslateOptions::max_len_a)
      .def_rw("max_len_b", &xf::TranslateOptions::max_len_b)
      .def_rw("max_decoding_length", &xf::TranslateOptions::max_decoding_length)
      .def_rw("min_decoding_length", &xf::TranslateOptions::min_decoding_length)
      .def_rw("disable_unk", &xf::TranslateOptions::disable_unk)
      .def_rw("disable_loop_guard", &xf::TranslateOptions::disable_loop_guard)
      .def_rw("disable_sentence_splitting", &xf::TranslateOptions::disable_sentence_splitting)
      .def_rw("max_batch_size", &xf::TranslateOptions::max_batch_size)
      .def_prop_rw(
          "batch_type", [](const xf::TranslateOptions& o) { return std::string(xf::batch_type_name(o.batch_type)); },
          [](xf::TranslateOptions& o, const std::string& name) { o.batch_type = xf::parse_batch_type(name); })
      .def_rw("sampling_topk", &xf::TranslateOptions::sampling_topk)
      .def_rw("sampling_topp", &xf::TranslateOptions::sampling_topp)
      .def_rw("sampling_temperature", &xf::TranslateOptions::sampling_temperature)
      .def_rw("seed", &xf::TranslateOptions::seed)
      .def_rw("repetition_penalty", &xf::TranslateOptions::repetition_penalty)
      .def_rw("no_repeat_ngram_size", &xf::TranslateOptions::no_repeat_ngram_size);

  nb::class_<PyTranslator>(m, "Translator")
      .def(nb::init<const std::string&, const std::string&, int, int, int, int, std::optional<std::string>, float, int,
                    const std::string&, int, int, float>(),
           nb::arg("model_path"), nb::arg("device"), nb::arg("max_batch"), nb::arg("max_beam"), nb::arg("threads"),
           nb::arg("max_source_len"), nb::arg("weight_dtype").none(), nb::arg("max_len_a"), nb::arg("max_len_b"),
           nb::arg("shortlist"), nb::arg("shortlist_first"), nb::arg("shortlist_best"), nb::arg("shortlist_threshold"))
      .def("translate", &PyTranslator::translate, nb::arg("source"), nb::arg("target_prefix").none(),
           nb::arg("options"), nb::arg("max_input_length"), nb::arg("callback").none())
      .def("score", &PyTranslator::score, nb::arg("source"), nb::arg("target"), nb::arg("options"),
           nb::arg("max_input_length"))
      .def("tokenize", &PyTranslator::tokenize, nb::arg("text"))
      .def_prop_ro("decoding_defaults", &PyTranslator::decoding_defaults)
      .def_prop_ro("threads", [](const PyTranslator& t) { return t.options().threads; })
      .def_prop_ro("max_batch", [](const PyTranslator& t) { return t.options().max_batch; })
      .def_prop_ro("max_beam", [](const PyTranslator& t) { return t.options().max_beam; })
      .def_prop_ro("max_source_len", [](const PyTranslator& t) { return t.options().max_source_len; })
      .def_prop_ro("device", [](const PyTranslator& t) { return std::string(xf::device_name(t.options().device)); });
}
