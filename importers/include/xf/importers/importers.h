#pragma once
// Importers of models made by other software: each reads the original files, maps the weights
// onto xf's parameter list (format/parameters.h) and the model's behaviour onto ModelConfig, and
// writes one .xfm that xf-run translates from text with no other file. Whatever a model needs that
// xf cannot compute is refused with one line naming the config key or file at fault, before
// anything is written.
#include <functional>
#include <map>
#include <string>

#include "xf/dtype.h"
#include "xf/weight_layout.h"

namespace xf::importers {

struct ImportOptions {
  DType dtype = DType::f32;                     // matrices; biases and norms stay f32
  std::map<std::string, std::string> metadata;  // added to (and winning over) the importer's
  // When given, the layout each tensor is stored in, by name and stored dtype (xf-convert
  // --layout panels: the layers' matrices as the CPU's products read them); else rows.
  std::function<WeightLayout(const std::string& name, DType dtype)> layout_of;
};

// A Hugging Face MarianMTModel directory: config.json, model.safetensors (else pytorch_model.bin),
// source.spm, target.spm, vocab.json (optional: generation_config.json, whose single-token
// bad_words_ids become an output bias of -inf, as generate() masks them, and whose num_beams
// becomes decoding.beam). Read without PyTorch.
void import_hugging_face(const std::string& directory, const std::string& output,
                         const ImportOptions& options);

// A Marian transformer: a directory with decoder.yml (naming the model and vocabularies), a
// decoder config .yml itself (Firefox Translations' config.intgemm8bit.yml), or the model itself,
// .npz or Marian's binary .bin (its embedded special:model.yml, vocabularies from decoder.yml
// beside it or the usual names: vocab.yml or vocab.src.yml/vocab.trg.yml, source.spm and
// target.spm). Self-attention or SSRU decoders; the config's `shortlist` is stored in the model;
// intgemm8 matrices keep Marian's int8 values when options.dtype is int8.
void import_marian(const std::string& directory_model_or_config, const std::string& output,
                   const ImportOptions& options);

}  // namespace xf::importers
