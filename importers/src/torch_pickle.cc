#include "torch_pickle.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "xf/error.h"

namespace xf::importers {
namespace {

// The values this subset of pickle builds.
struct Value;
using ValuePtr = std::shared_ptr<Value>;
struct Value {
  enum class Kind { none, boolean, integer, text, tuple, dict, global, storage, tensor } kind;
  int64_t integer = 0;          // integer, boolean
  std::string text;             // text; global: "module.name"
  std::vector<ValuePtr> items;  // tuple; dict: key, value, key, value...
  TorchTensorRef tensor;        // storage (key, dtype, elements), tensor
};

ValuePtr make(Value::Kind kind) {
  auto value = std::make_shared<Value>();
  value->kind = kind;
  return value;
}

const char* const kStateDictGlobals = "collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
                                      "torch.FloatStorage, torch.HalfStorage, torch.BFloat16Storage";

// The storage type a global names, or "".
std::string storage_dtype(const std::string& global) {
  if (global == "torch.FloatStorage") return "f32";
  if (global == "torch.HalfStorage") return "f16";
  if (global == "torch.BFloat16Storage") return "bf16";
  return "";
}

class PickleReader {
 public:
  explicit PickleReader(const std::string& bytes) : bytes_(bytes) {}

  ValuePtr run() {
    for (;;) {
      const size_t at = position_;
      const uint8_t opcode = byte();
      switch (opcode) {
        case 0x80: byte(); break;  // PROTO
        case '}': push(make(Value::Kind::dict)); break;  // EMPTY_DICT
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case 'X': push_text(little_endian(4)); break;  // BINUNICODE
        case 0x8c: push_text(byte()); break;  // SHORT_BINUNICODE
        case 'c': {  // GLOBAL
          const std::string module = line(), name = line(), global = module + "." + name;
          if (global != "collections.OrderedDict" && global != "torch._utils._rebuild_tensor_v2" &&
              storage_dtype(global).empty())
            throw Error("pickle global '" + global + "' at byte " + std::to_string(at) +
                        " is not one a state dict of tensors uses (" + kStateDictGlobals + ")");
          auto value = make(Value::Kind::global);
          value->text = global;
          push(value);
          break;
        }
        case 'Q': push(persistent_storage(pop())); break;  // BINPERSID
        case 'J': {  // BININT
          const uint64_t bits = little_endian(4);
          push_integer(static_cast<int32_t>(static_cast<uint32_t>(bits)));
          break;
        }
        case 'K': push_integer(byte()); break;  // BININT1
        case 'M': push_integer(static_cast<int64_t>(little_endian(2))); break;  // BININT2
        case 0x8a: {  // LONG1: n bytes, little-endian two's complement
          const size_t n = byte();
          if (n > 8) throw Error("pickle integer of " + std::to_string(n) + " bytes at byte " + std::to_string(at));
          uint64_t bits = n == 0 ? 0 : little_endian(n);
          if (n > 0 && n < 8 && (bits >> (8 * n - 1)) & 1) bits |= ~uint64_t{0} << (8 * n);
          push_integer(static_cast<int64_t>(bits));
          break;
        }
        case 't': push_tuple(pop_to_mark()); break;  // TUPLE
        case ')': push_tuple({}); break;  // EMPTY_TUPLE
        case 0x85: case 0x86: case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
          const size_t n = opcode - 0x84u;
          if (stack_.size() < n + base()) throw malformed(at);
          std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push_tuple(std::move(items));
          break;
        }
        case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
          auto value = make(Value::Kind::boolean);
          value->integer = opcode == 0x88;
          push(value);
          break;
        }
        case 'N': push(make(Value::Kind::none)); break;  // NONE
        case 'R': {  // REDUCE
          ValuePtr args = pop(), callable = pop();
          push(call(*callable, *args, at));
          break;
        }
        case 'b': {  // BUILD: the state torch.save gives the OrderedDict (its _metadata) is not needed
          pop();
          if (top().kind != Value::Kind::dict) throw Error("pickle BUILD of a non-dict at byte " + std::to_string(at));
          break;
        }
        case 's': {  // SETITEM
          ValuePtr value = pop(), key = pop();
          set_items(top(), {key, value}, at);
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<ValuePtr> items = pop_to_mark();
          set_items(top(), items, at);
          break;
        }
        case 'q': memo_[byte()] = top_ptr(); break;  // BINPUT
        case 'r': memo_[little_endian(4)] = top_ptr(); break;  // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top_ptr(); break;  // MEMOIZE
        case 'h': push(memo(byte(), at)); break;  // BINGET
        case 'j': push(memo(little_endian(4), at)); break;  // LONG_BINGET
        case '.': {  // STOP
          ValuePtr result = pop();
          if (!stack_.empty() || !marks_.empty()) throw malformed(at);
          return result;
        }
        default: {
          char name[8];
          std::snprintf(name, sizeof name, "0x%02x", opcode);
          throw Error(std::string("pickle opcode ") + name + " at byte " + std::to_string(at) +
                      " is not one torch.save writes for a state dict of tensors");
        }
      }
    }
  }

 private:
  Error malformed(size_t at) const { return Error("malformed pickle at byte " + std::to_string(at)); }

  uint8_t byte() {
    if (position_ >= bytes_.size()) throw Error("truncated pickle (" + std::to_string(bytes_.size()) + " bytes)");
    return static_cast<uint8_t>(bytes_[position_++]);
  }
  uint64_t little_endian(size_t n) {
    uint64_t value = 0;
    for (size_t i = 0; i < n; ++i) value |= uint64_t{byte()} << (8 * i);
    return value;
  }
  std::string take(uint64_t n) {
    if (n > bytes_.size() - position_) throw Error("truncated pickle (" + std::to_string(bytes_.size()) + " bytes)");
    std::string text = bytes_.substr(position_, n);
    position_ += n;
    return text;
  }
  std::string line() {
    const size_t end = bytes_.find('\n', position_);
    if (end == std::string::npos) throw Error("truncated pickle (" + std::to_string(bytes_.size()) + " bytes)");
    std::string text = bytes_.substr(position_, end - position_);
    position_ = end + 1;
    return text;
  }

  size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(ValuePtr value) { stack_.push_back(std::move(value)); }
  void push_text(uint64_t size) {
    auto value = make(Value::Kind::text);
    value->text = take(size);
    push(value);
  }
  void push_integer(int64_t integer) {
    auto value = make(Value::Kind::integer);
    value->integer = integer;
    push(value);
  }
  void push_tuple(std::vector<ValuePtr> items) {
    auto value = make(Value::Kind::tuple);
    value->items = std::move(items);
    push(value);
  }
  ValuePtr pop() {
    if (stack_.size() <= base()) throw malformed(position_ - 1);
    ValuePtr value = std::move(stack_.back());
    stack_.pop_back();
    return value;
  }
  const ValuePtr& top_ptr() const {
    if (stack_.size() <= base()) throw malformed(position_ - 1);
    return stack_.back();
  }
  Value& top() const { return *top_ptr(); }
  std::vector<ValuePtr> pop_to_mark() {
    if (marks_.empty()) throw malformed(position_ - 1);
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  ValuePtr memo(uint64_t index, size_t at) const {
    const auto it = memo_.find(index);
    if (it == memo_.end()) throw Error("pickle reads memo " + std::to_string(index) + " before it is set, at byte " +
                                       std::to_string(at));
    return it->second;
  }

  static void set_items(Value& dict, const std::vector<ValuePtr>& items, size_t at) {
    if (dict.kind != Value::Kind::dict || items.size() % 2 != 0)
      throw Error("pickle sets items of a non-dict at byte " + std::to_string(at));
    dict.items.insert(dict.items.end(), items.begin(), items.end());
  }

  // ('storage', torch.FloatStorage, key, location, numel): a storage in <prefix>/data/<key>.
  static ValuePtr persistent_storage(const ValuePtr& id) {
    const auto& f = id->items;
    if (id->kind != Value::Kind::tuple || f.size() != 5 || f[0]->kind != Value::Kind::text ||
        f[0]->text != "storage" || f[1]->kind != Value::Kind::global || f[2]->kind != Value::Kind::text ||
        f[4]->kind != Value::Kind::integer || f[4]->integer < 0)
      throw Error("pickle persistent id is not ('storage', type, key, location, numel)");
    // Bounded as the other readers' shapes are, so that numel times the element size cannot wrap.
    if (f[4]->integer > (int64_t{1} << 40)) throw Error("storage '" + f[2]->text + "' is too large");
    auto storage = make(Value::Kind::storage);
    storage->tensor.dtype = storage_dtype(f[1]->text);
    if (storage->tensor.dtype.empty())
      throw Error("storage '" + f[2]->text + "' is a " + f[1]->text + " (FloatStorage, HalfStorage or BFloat16Storage)");
    storage->tensor.storage_key = f[2]->text;
    storage->tensor.storage_elements = static_cast<uint64_t>(f[4]->integer);
    return storage;
  }

  static ValuePtr call(const Value& callable, const Value& args, size_t at) {
    if (callable.kind != Value::Kind::global || args.kind != Value::Kind::tuple)
      throw Error("pickle REDUCE of a non-global at byte " + std::to_string(at));
    if (callable.text == "collections.OrderedDict" && args.items.empty()) return make(Value::Kind::dict);
    if (callable.text == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args.items);
    throw Error("pickle calls " + callable.text + " at byte " + std::to_string(at) +
                " (only OrderedDict() and _rebuild_tensor_v2 are read)");
  }

  static std::vector<uint64_t> sizes(const Value& tuple, const char* what) {
    std::vector<uint64_t> out;
    if (tuple.kind != Value::Kind::tuple) throw Error(std::string("tensor ") + what + " is not a tuple");
    for (const ValuePtr& item : tuple.items) {
      if (item->kind != Value::Kind::integer || item->integer < 0)
        throw Error(std::string("tensor ") + what + " is not a tuple of non-negative integers");
      out.push_back(static_cast<uint64_t>(item->integer));
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
  static ValuePtr rebuild_tensor(const std::vector<ValuePtr>& a) {
    if (a.size() < 6 || a.size() > 7 || a[0]->kind != Value::Kind::storage || a[1]->kind != Value::Kind::integer ||
        a[1]->integer < 0)
      throw Error("_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, requires_grad, hooks)");
    auto tensor = make(Value::Kind::tensor);
    tensor->tensor = a[0]->tensor;
    tensor->tensor.offset = static_cast<uint64_t>(a[1]->integer);
    tensor->tensor.shape = sizes(*a[2], "size");
    const std::vector<uint64_t> stride = sizes(*a[3], "stride");
    if (stride.size() != tensor->tensor.shape.size()) throw Error("tensor stride and size differ in length");
    uint64_t expected = 1, count = 1;
    for (size_t d = tensor->tensor.shape.size(); d-- > 0;) {
      const uint64_t size = tensor->tensor.shape[d];
      // A dimension of size 1 (or 0) may have any stride.
      if (size > 1 && stride[d] != expected)
        throw Error("tensor in storage '" + tensor->tensor.storage_key + "' is not contiguous (a view or transpose: "
                    "save its .contiguous() copy)");
      if (size != 0 && expected > (uint64_t{1} << 40) / size) throw Error("tensor shape too large");
      expected *= size;
      count *= size;
    }
    if (tensor->tensor.offset > tensor->tensor.storage_elements ||
        count > tensor->tensor.storage_elements - tensor->tensor.offset)
      throw Error("tensor reaches past the end of storage '" + tensor->tensor.storage_key + "'");
    return tensor;
  }

  const std::string& bytes_;
  size_t position_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

}  // namespace

std::vector<std::pair<std::string, TorchTensorRef>> read_state_dict_pickle(const std::string& pickle) {
  const ValuePtr result = PickleReader(pickle).run();
  if (result->kind != Value::Kind::dict) throw Error("the pickle holds no dict (not a state dict)");
  std::vector<std::pair<std::string, TorchTensorRef>> tensors;
  for (size_t i = 0; i < result->items.size(); i += 2) {
    const Value& key = *result->items[i];
    const Value& value = *result->items[i + 1];
    if (key.kind != Value::Kind::text) throw Error("the state dict has a key that is not a string");
    if (value.kind != Value::Kind::tensor) throw Error("state dict entry '" + key.text + "' is not a tensor");
    tensors.emplace_back(key.text, value.tensor);
  }
  return tensors;
}

}  // namespace xf::importers
