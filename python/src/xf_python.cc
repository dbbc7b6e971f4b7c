// xf._xf: the runtime's Translator for Python (nanobind). The Python side (xf/__init__.py)
// wraps the tuples returned here into TranslationResult objects.
//
// Sources are text (str) or SentencePiece pieces (a list of str); both become ids here, with the
// GIL held; translation runs with the GIL released, one call at a time per Translator.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xf/error.h"
#include "xf/model.h"
#include "xf/translator.h"

namespace nb = nanobind;

namespace {

// One source or target prefix: text, or a list of pieces. Throws nb::type_error for anything else.
struct Input {
  bool is_text = true;
  std::string text;
  std::vector<std::string> pieces;
};

std::string utf8(nb::handle str, const char* what, size_t index) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    throw nb::value_error((std::string(what) + "[" + std::to_string(index) +
                           "] is not valid Unicode text (invalid UTF-8: a lone surrogate)").c_str());
  }
  return std::string(data, static_cast<size_t>(size));
}

Input read_input(nb::handle item, const char* what, size_t index) {
  Input input;
  if (nb::isinstance<nb::str>(item)) {
    input.text = utf8(item, what, index);
    return input;
  }
  if (nb::isinstance<nb::list>(item) || nb::isinstance<nb::tuple>(item)) {
    input.is_text = false;
    for (nb::handle piece : item) {
      if (!nb::isinstance<nb::str>(piece))
        throw nb::type_error((std::string(what) + "[" + std::to_string(index) +
                              "] must be a str or a list of str pieces, found a " +
                              nb::type_name(piece.type()).c_str() + " in the list").c_str());
      input.pieces.push_back(utf8(piece, what, index));
    }
    return input;
  }
  throw nb::type_error((std::string(what) + "[" + std::to_string(index) + "] must be a str or a list of str pieces, got " +
                        nb::type_name(item.type()).c_str()).c_str());
}

std::vector<Input> read_inputs(nb::handle sequence, const char* what) {
  if (nb::isinstance<nb::str>(sequence) || !(nb::isinstance<nb::list>(sequence) || nb::isinstance<nb::tuple>(sequence)))
    throw nb::type_error((std::string(what) + " must be a list of str or of lists of str pieces, got " +
                          nb::type_name(sequence.type()).c_str()).c_str());
  std::vector<Input> inputs;
  size_t index = 0;
  for (nb::handle item : sequence) inputs.push_back(read_input(item, what, index++));
  return inputs;
}

class PyTranslator {
 public:
  PyTranslator(const std::string& model_path, const std::string& device, int max_batch, int max_beam,
               int threads, int max_source_len, std::optional<std::string> weight_dtype, float max_len_a,
               int max_len_b) {
    xf::TranslatorOptions options;
    options.device = xf::parse_device(device);
    options.max_batch = max_batch;
    options.beam = max_beam;
    options.threads = threads;
    options.max_source_len = max_source_len;
    if (weight_dtype) options.weight_dtype = xf::parse_dtype(*weight_dtype);
    options.max_len_a = max_len_a;
    options.max_len_b = max_len_b;
    nb::gil_scoped_release released;  // loading and packing the weights takes a while
    model_ = xf::Model::open(model_path);
    translator_ = std::make_unique<xf::Translator>(model_, options);
  }

  // Returns, per source: (is_text, texts, pieces, ids, scores, log_probs) over its hypotheses.
  nb::list translate(nb::handle source, nb::handle target_prefix, const xf::TranslateOptions& options) {
    const std::vector<Input> sources = read_inputs(source, "source");
    std::vector<Input> prefixes;
    if (!target_prefix.is_none()) {
      prefixes = read_inputs(target_prefix, "target_prefix");
      if (prefixes.size() != sources.size())
        throw xf::Error("target_prefix has " + std::to_string(prefixes.size()) + " entries for " +
                        std::to_string(sources.size()) + " sources");
    }
    std::vector<xf::TokenTranslation> results;
    {
      nb::gil_scoped_release released;
      std::lock_guard<std::mutex> lock(mutex_);  // after releasing the GIL: no lock-order cycle
      std::vector<std::vector<int32_t>> ids(sources.size()), prefix_ids(prefixes.size());
      for (size_t i = 0; i < sources.size(); ++i) {
        try {
          ids[i] = sources[i].is_text ? model_->encode_source(sources[i].text) : model_->source_piece_ids(sources[i].pieces);
          if (!prefixes.empty())
            prefix_ids[i] = prefixes[i].is_text ? model_->encode_target(prefixes[i].text)
                                                : model_->target_piece_ids(prefixes[i].pieces);
        } catch (const xf::Error& e) {
          throw xf::Error("sentence " + std::to_string(i + 1) + ": " + e.what());
        }
      }
      translator_->translate_ids(ids, options, results, prefix_ids);
    }
    nb::list out;
    for (size_t i = 0; i < sources.size(); ++i) {
      nb::list texts, pieces, ids, scores, log_probs;
      for (const xf::TokenHypothesis& h : results[i].hypotheses) {
        texts.append(model_->decode_target(h.ids.data(), h.ids.size()));
        pieces.append(nb::cast(model_->target_pieces(h.ids.data(), h.ids.size())));
        ids.append(nb::cast(h.ids));
        scores.append(h.score);
        log_probs.append(h.log_prob);
      }
      out.append(nb::make_tuple(sources[i].is_text, texts, pieces, ids, scores, log_probs));
    }
    return out;
  }

  // The model's SentencePiece pieces of a source text (what translate() accepts as a list).
  std::vector<std::string> tokenize(const std::string& text) const {
    const std::vector<int32_t> ids = model_->encode_source(text);
    return model_->source_pieces(ids.data(), ids.size());
  }

  const xf::TranslatorOptions& options() const { return translator_->options(); }

 private:
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
      .def_rw("max_len_a", &xf::TranslateOptions::max_len_a)
      .def_rw("max_len_b", &xf::TranslateOptions::max_len_b)
      .def_rw("max_decoding_length", &xf::TranslateOptions::max_decoding_length)
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
      .def(nb::init<const std::string&, const std::string&, int, int, int, int, std::optional<std::string>, float, int>(),
           nb::arg("model_path"), nb::arg("device"), nb::arg("max_batch"), nb::arg("max_beam"), nb::arg("threads"),
           nb::arg("max_source_len"), nb::arg("weight_dtype").none(), nb::arg("max_len_a"), nb::arg("max_len_b"))
      .def("translate", &PyTranslator::translate, nb::arg("source"), nb::arg("target_prefix").none(),
           nb::arg("options"))
      .def("tokenize", &PyTranslator::tokenize, nb::arg("text"))
      .def_prop_ro("threads", [](const PyTranslator& t) { return t.options().threads; })
      .def_prop_ro("max_batch", [](const PyTranslator& t) { return t.options().max_batch; })
      .def_prop_ro("max_beam", [](const PyTranslator& t) { return t.options().beam; })
      .def_prop_ro("device", [](const PyTranslator& t) { return std::string(xf::device_name(t.options().device)); });
}
