// TensorBoard event files (tensorboard_events.h): the record framing, CRC-32C and the protobuf
// wire format of the few fields written.
#include "xf/trainer/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>

#include "xf/error.h"

namespace xf::trainer {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = crc & 1 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}

// The protobuf wire format: a field's key is (number << 3 | wire type); 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32; fixed-width values little-endian.
void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}
template <typename T>
void append_little_endian(std::string& out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((bits >> (8 * i)) & 0xFF);
}
void append_key(std::string& out, int field, int wire_type) {
  append_varint(out, static_cast<uint64_t>(field) << 3 | wire_type);
}
void append_bytes_field(std::string& out, int field, const std::string& bytes) {
  append_key(out, field, 2);
  append_varint(out, bytes.size());
  out += bytes;
}

// Event: wall_time = 1 (double), step = 2 (int64), then one of file_version = 3 (string),
// summary = 5 (Summary), session_log = 6 (SessionLog).
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  append_key(event, 1, 1);
  append_little_endian(event, wall_time);
  if (step != 0) {
    append_key(event, 2, 0);
    append_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

double seconds_since_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tensorboard_record(const std::string& event) {
  std::string record;
  append_little_endian(record, static_cast<uint64_t>(event.size()));
  append_little_endian(record, masked_crc32c(record.data(), 8));
  record += event;
  append_little_endian(record, masked_crc32c(event.data(), event.size()));
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  append_bytes_field(event, 3, "brain.Event:2");
  return event;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session_log;  // SessionLog: status = 1 (enum), START = 1
  append_key(session_log, 1, 0);
  append_varint(session_log, 1);
  std::string event = event_head(wall_time, step);
  append_bytes_field(event, 6, session_log);
  return event;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string summary_value;  // Summary.Value: tag = 1 (string), simple_value = 2 (float)
  append_bytes_field(summary_value, 1, tag);
  append_key(summary_value, 2, 5);
  append_little_endian(summary_value, value);
  std::string summary;  // Summary: value = 1 (repeated Value)
  append_bytes_field(summary, 1, summary_value);
  std::string event = event_head(wall_time, step);
  append_bytes_field(event, 5, summary);
  return event;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = seconds_since_epoch();
  // The writer's number in this process keeps two starts within one second apart (a test's run
  // and its resumption); TensorBoard reads a folder's files in the order of their names.
  static std::atomic<int> writers_made{0};
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host +
          "." + std::to_string(getpid()) + "." + std::to_string(writers_made++);
  file_ = std::fopen(path_.c_str(), "ab");
  if (file_ == nullptr) throw Error(path_ + ": cannot open for writing");
  write(file_version_event(now));
  write(session_start_event(now, first_step + 1));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::scalar(int64_t step, const std::string& tag, float value) {
  write(scalar_event(seconds_since_epoch(), step, tag, value));
}

void TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed");
}

void TensorBoardWriter::write(const std::string& event) {
  const std::string record = tensorboard_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    throw Error(path_ + ": write failed");
  }
}

bool is_tensorboard_event_file(const std::string& file_name) {
  return file_name.rfind("events.out.tfevents.", 0) == 0;
}

}  // namespace xf::trainer
