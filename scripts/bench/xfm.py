"""Reads and writes xf flat model files (.xfm) from Python, for the benchmark scripts.

The byte layout is format/include/xf/format/file_layout.h:

    [0, 4)      u32 header size H (little endian)
    [4, 8)      u32 CRC-32 (IEEE) of the header bytes
    [8, 8+H)    FlatBuffers header (format/xf_model.fbs), identifier "XFM1"
    [8+H, B)    zero padding, B = align_up(8 + H, 256)
    [B, B+S)    weight blob; tensor offsets are relative to B and multiples of 256

The FlatBuffers Python classes are generated from format/xf_model.fbs with `flatc --python` into
a temporary directory at import time, so the schema stays the one source of truth.
Parameter names and shapes mirror format/src/parameters.cc (transformer_parameters()).
"""
import atexit
import importlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCHEMA = os.path.join(REPO_ROOT, "format", "xf_model.fbs")
FORMAT_VERSION = 1
BLOB_ALIGNMENT = 256
PREAMBLE_SIZE = 8
IDENTIFIER = b"XFM1"

# DType enum of the schema -> (name, numpy dtype of the stored values)
DTYPES = {0: ("f32", np.float32), 1: ("f16", np.float16), 2: ("bf16", np.uint16), 3: ("int8", np.int8)}
DTYPE_CODES = {name: code for code, (name, _) in DTYPES.items()}

CONFIG_FIELDS = [
    # (ModelConfig field, accessor in the generated class, schema default)
    ("source_vocab_size", "SourceVocabSize", 0),
    ("target_vocab_size", "TargetVocabSize", 0),
    ("d_model", "DModel", 0),
    ("num_heads", "NumHeads", 0),
    ("d_ff", "DFf", 0),
    ("encoder_layers", "EncoderLayers", 0),
    ("decoder_layers", "DecoderLayers", 0),
    ("max_positions", "MaxPositions", 0),
    ("norm_position", "NormPosition", 0),  # 0 post, 1 pre
    ("shared_embeddings", "SharedEmbeddings", False),
    ("tied_output", "TiedOutput", False),
    ("output_bias", "OutputBias", False),
    ("layer_norm_epsilon", "LayerNormEpsilon", 1e-6),
    ("pad_id", "PadId", 0),
    ("unk_id", "UnkId", 1),
    ("bos_id", "BosId", 2),
    ("eos_id", "EosId", 3),
]


class XfmError(Exception):
    """A file that is not a valid xf model, with the reason."""


_fb = None


def _fb_module():
    """The flatc-generated package xf.fb (generated once per process)."""
    global _fb
    if _fb is None:
        flatc = shutil.which("flatc")
        if flatc is None:
            raise XfmError("flatc not found on PATH (Debian package flatbuffers-compiler)")
        out_dir = tempfile.mkdtemp(prefix="xfm-flatc-")
        # Removed at exit, not after the imports: the generated modules import each other lazily.
        atexit.register(shutil.rmtree, out_dir, True)
        subprocess.run([flatc, "--python", "-o", out_dir, SCHEMA], check=True)
        sys.path.insert(0, out_dir)
        try:
            _fb = {name: importlib.import_module("xf.fb." + name)
                   for name in ("Model", "ModelConfig", "Tensor", "KeyValue")}
        finally:
            sys.path.remove(out_dir)
    return _fb


def align_up(value, alignment):
    return (value + alignment - 1) // alignment * alignment


# ----------------------------------------------------------------------------------------------
# Parameters (format/src/parameters.cc)

def source_embedding_name(c):
    return "embedding.shared" if c["shared_embeddings"] else "embedding.source"


def target_embedding_name(c):
    return "embedding.shared" if c["shared_embeddings"] else "embedding.target"


def output_projection_name(c):
    return target_embedding_name(c) if c["tied_output"] else "output.weight"


def transformer_parameters(c):
    """[(name, shape)] in the order of xf::transformer_parameters()."""
    d, ff = c["d_model"], c["d_ff"]
    specs = []

    def linear(prefix, out_features, in_features):
        specs.append((prefix + ".weight", (out_features, in_features)))
        specs.append((prefix + ".bias", (out_features,)))

    def norm(prefix):
        specs.append((prefix + ".gamma", (d,)))
        specs.append((prefix + ".beta", (d,)))

    specs.append((source_embedding_name(c), (c["source_vocab_size"], d)))
    if not c["shared_embeddings"]:
        specs.append((target_embedding_name(c), (c["target_vocab_size"], d)))

    def self_attention(p):
        linear(p + "self_attention.qkv", 3 * d, d)
        linear(p + "self_attention.output", d, d)
        norm(p + "self_attention_norm")

    def ffn(p):
        linear(p + "ffn.inner", ff, d)
        linear(p + "ffn.outer", d, ff)
        norm(p + "ffn_norm")

    for i in range(c["encoder_layers"]):
        self_attention("encoder.layers.%d." % i)
        ffn("encoder.layers.%d." % i)
    if c["norm_position"] == 1:
        norm("encoder.final_norm")
    for i in range(c["decoder_layers"]):
        p = "decoder.layers.%d." % i
        self_attention(p)
        linear(p + "cross_attention.query", d, d)
        linear(p + "cross_attention.key_value", 2 * d, d)
        linear(p + "cross_attention.output", d, d)
        norm(p + "cross_attention_norm")
        ffn(p)
    if c["norm_position"] == 1:
        norm("decoder.final_norm")
    if not c["tied_output"]:
        specs.append(("output.weight", (c["target_vocab_size"], d)))
    if c["output_bias"]:
        specs.append(("output.bias", (c["target_vocab_size"],)))
    return specs


# ----------------------------------------------------------------------------------------------
# Reading

class StoredTensor:
    """One tensor as stored: values in the file's dtype, and int8's per-row scales."""

    def __init__(self, dtype, values, scales=None):
        self.dtype = dtype    # "f32", "f16", "bf16", "int8"
        self.values = values  # numpy array with the tensor's shape
        self.scales = scales  # float32 [shape[0]] for int8 (value = q * scale), else None

    def to_float32(self):
        if self.dtype == "f32":
            return self.values.astype(np.float32)
        if self.dtype == "f16":
            return self.values.astype(np.float32)
        if self.dtype == "bf16":
            return (self.values.astype(np.uint32) << 16).view(np.float32)
        rows = self.values.shape[0]
        return (self.values.reshape(rows, -1).astype(np.float32)
                * self.scales[:, None]).reshape(self.values.shape)


class XfmModel:
    def __init__(self, config, tensors, source_tokenizer, target_tokenizer, metadata):
        self.config = config                      # dict of ModelConfig fields
        self.tensors = tensors                    # name -> StoredTensor
        self.source_tokenizer = source_tokenizer  # SentencePiece proto bytes, b"" when none
        self.target_tokenizer = target_tokenizer  # b"" when the source one serves both sides
        self.metadata = metadata                  # dict str -> str


def read_xfm(path):
    """Reads and checks a model file; raises XfmError naming the problem."""
    fb = _fb_module()
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < PREAMBLE_SIZE:
        raise XfmError("%s: %d bytes, too short for a model file" % (path, len(data)))
    header_size, checksum = struct.unpack_from("<II", data, 0)
    if PREAMBLE_SIZE + header_size > len(data):
        raise XfmError("%s: header size %d runs past the end of the file" % (path, header_size))
    header = data[PREAMBLE_SIZE:PREAMBLE_SIZE + header_size]
    if zlib.crc32(header) != checksum:
        raise XfmError("%s: header checksum mismatch" % path)
    if header[4:8] != IDENTIFIER:
        raise XfmError("%s: file identifier %r, expected %r" % (path, header[4:8], IDENTIFIER))
    model = fb["Model"].Model.GetRootAs(header, 0)
    if model.FormatVersion() != FORMAT_VERSION:
        raise XfmError("%s: format version %d, this script reads %d"
                       % (path, model.FormatVersion(), FORMAT_VERSION))
    blob_offset = align_up(PREAMBLE_SIZE + header_size, BLOB_ALIGNMENT)
    blob_size = model.BlobSize()
    if blob_offset + blob_size != len(data):
        raise XfmError("%s: blob of %d bytes at %d does not end the %d-byte file"
                       % (path, blob_size, blob_offset, len(data)))
    blob = memoryview(data)[blob_offset:]

    fc = model.Config()
    if fc is None:
        raise XfmError("%s: no config" % path)
    config = {field: getattr(fc, accessor)() for field, accessor, _ in CONFIG_FIELDS}
    config["shared_embeddings"] = bool(config["shared_embeddings"])
    config["tied_output"] = bool(config["tied_output"])
    config["output_bias"] = bool(config["output_bias"])

    tensors = {}
    for i in range(model.TensorsLength()):
        t = model.Tensors(i)
        name = t.Name().decode("utf-8")
        if t.Dtype() not in DTYPES:
            raise XfmError("%s: tensor '%s' has unknown dtype %d" % (path, name, t.Dtype()))
        dtype_name, np_dtype = DTYPES[t.Dtype()]
        shape = tuple(int(t.Shape(k)) for k in range(t.ShapeLength()))
        count = int(np.prod(shape)) if shape else 1
        nbytes = count * np.dtype(np_dtype).itemsize
        if t.Size() != nbytes or t.Offset() + nbytes > blob_size:
            raise XfmError("%s: tensor '%s' size/offset outside the blob" % (path, name))
        values = np.frombuffer(blob, dtype=np_dtype, count=count, offset=t.Offset()).reshape(shape)
        scales = None
        if dtype_name == "int8":
            if t.ScalesOffset() + 4 * shape[0] > blob_size:
                raise XfmError("%s: tensor '%s' scales outside the blob" % (path, name))
            scales = np.frombuffer(blob, dtype=np.float32, count=shape[0], offset=t.ScalesOffset())
        tensors[name] = StoredTensor(dtype_name, values, scales)

    for name, shape in transformer_parameters(config):
        if name not in tensors:
            raise XfmError("%s: missing tensor '%s'" % (path, name))
        if tensors[name].values.shape != tuple(shape):
            raise XfmError("%s: tensor '%s' has shape %s, the config needs %s"
                           % (path, name, tensors[name].values.shape, tuple(shape)))

    metadata = {}
    for i in range(model.MetadataLength()):
        kv = model.Metadata(i)
        metadata[kv.Key().decode("utf-8")] = kv.Value().decode("utf-8")
    source_tokenizer = model.SourceTokenizerAsNumpy()
    target_tokenizer = model.TargetTokenizerAsNumpy()
    as_bytes = lambda v: v.tobytes() if isinstance(v, np.ndarray) else b""  # 0 when absent
    return XfmModel(config, tensors, as_bytes(source_tokenizer), as_bytes(target_tokenizer),
                    metadata)


# ----------------------------------------------------------------------------------------------
# Writing

def quantize_rows_int8(values):
    """xf's rule (format/src/dtype_convert.cc): scale = max|row| / 127 (1 for a zero row),
    q = round-half-even(x / scale) clamped to [-127, 127]."""
    rows = values.reshape(values.shape[0], -1).astype(np.float32)
    absmax = np.abs(rows).max(axis=1)
    scales = np.where(absmax > 0, absmax / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(rows / scales[:, None]), -127, 127).astype(np.int8)
    return q.reshape(values.shape), scales


def write_xfm(path, config, tensors, source_tokenizer=b"", metadata=None, target_tokenizer=b""):
    """config: dict with every CONFIG_FIELDS key; tensors: name -> (dtype name, float32 array).
    Matrices given as int8 are quantized per row; 1-D tensors must be f32/f16/bf16."""
    fb = _fb_module()
    import flatbuffers

    expected = dict(transformer_parameters(config))
    if set(expected) != set(tensors):
        raise XfmError("tensors do not match the config: missing %s, unexpected %s"
                       % (sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))))

    blob = bytearray()

    def append(raw):
        offset = align_up(len(blob), BLOB_ALIGNMENT)
        blob.extend(b"\0" * (offset - len(blob)))
        blob.extend(raw)
        return offset

    builder = flatbuffers.Builder(1 << 16)
    M, C, T, KV = fb["Model"], fb["ModelConfig"], fb["Tensor"], fb["KeyValue"]
    tensor_offsets = []
    # FlatBuffers keys compare as bytes; the reader binary-searches them.
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        dtype, values = tensors[name]
        values = np.asarray(values, dtype=np.float32)
        if values.shape != tuple(expected[name]):
            raise XfmError("tensor '%s' has shape %s, the config needs %s"
                           % (name, values.shape, tuple(expected[name])))
        scales_offset = 0
        if dtype == "int8":
            q, scales = quantize_rows_int8(values)
            raw = q.tobytes()
            offset = append(raw)
            scales_offset = append(scales.tobytes())
        elif dtype == "f16":
            raw = values.astype(np.float16).tobytes()
            offset = append(raw)
        elif dtype == "f32":
            raw = values.tobytes()
            offset = append(raw)
        else:
            raise XfmError("tensor '%s': this writer handles f32, f16 and int8, not %s" % (name, dtype))
        name_offset = builder.CreateString(name)
        shape_offset = builder.CreateNumpyVector(np.asarray(values.shape, dtype=np.uint64))
        T.TensorStart(builder)
        T.TensorAddName(builder, name_offset)
        T.TensorAddDtype(builder, DTYPE_CODES[dtype])
        T.TensorAddShape(builder, shape_offset)
        T.TensorAddOffset(builder, offset)
        T.TensorAddSize(builder, len(raw))
        T.TensorAddScalesOffset(builder, scales_offset)
        tensor_offsets.append(T.TensorEnd(builder))
    blob.extend(b"\0" * (align_up(len(blob), BLOB_ALIGNMENT) - len(blob)))

    metadata_offsets = []
    for key in sorted(metadata or {}, key=lambda k: k.encode("utf-8")):
        k, v = builder.CreateString(key), builder.CreateString(metadata[key])
        KV.KeyValueStart(builder)
        KV.KeyValueAddKey(builder, k)
        KV.KeyValueAddValue(builder, v)
        metadata_offsets.append(KV.KeyValueEnd(builder))

    def vector_of(offsets, start):
        start(builder, len(offsets))
        for o in reversed(offsets):
            builder.PrependUOffsetTRelative(o)
        return builder.EndVector()

    tensors_vec = vector_of(tensor_offsets, M.ModelStartTensorsVector)
    metadata_vec = vector_of(metadata_offsets, M.ModelStartMetadataVector)
    tokenizer_vec = builder.CreateByteVector(source_tokenizer) if source_tokenizer else None
    target_vec = builder.CreateByteVector(target_tokenizer) if target_tokenizer else None

    C.ModelConfigStart(builder)
    for field, accessor, _ in CONFIG_FIELDS:
        adder = getattr(C, "ModelConfigAdd" + accessor)
        value = config[field]
        adder(builder, float(value) if field == "layer_norm_epsilon" else int(value))
    config_offset = C.ModelConfigEnd(builder)

    M.ModelStart(builder)
    M.ModelAddFormatVersion(builder, FORMAT_VERSION)
    M.ModelAddConfig(builder, config_offset)
    if tokenizer_vec is not None:
        M.ModelAddSourceTokenizer(builder, tokenizer_vec)
    if target_vec is not None:
        M.ModelAddTargetTokenizer(builder, target_vec)
    M.ModelAddMetadata(builder, metadata_vec)
    M.ModelAddTensors(builder, tensors_vec)
    M.ModelAddBlobSize(builder, len(blob))
    builder.Finish(M.ModelEnd(builder), file_identifier=IDENTIFIER)
    header = bytes(builder.Output())

    blob_offset = align_up(PREAMBLE_SIZE + len(header), BLOB_ALIGNMENT)
    out = bytearray(struct.pack("<II", len(header), zlib.crc32(header)))
    out.extend(header)
    out.extend(b"\0" * (blob_offset - len(out)))
    out.extend(blob)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)
