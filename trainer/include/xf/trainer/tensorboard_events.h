#pragma once
// TensorBoard's event files, where people who train models look at their curves (fairseq,
// OpenNMT-py and Hugging Face's Trainer write them too): `tensorboard --logdir RUN_DIR`. A file
// is a sequence of records, each a little-endian uint64 length, the masked CRC-32C of those 8
// bytes, the bytes of one protobuf `Event` and their masked CRC-32C. The few messages and fields
// written (Event: wall_time, step, file_version, summary, session_log; Summary.Value: tag,
// simple_value; SessionLog: status) are encoded here by hand: a dozen lines of the protobuf wire
// format, where generated code would bring protoc into the build (and the aarch64 cross build)
// for three messages.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace xf::trainer {

// CRC-32C (Castagnoli) of `size` bytes, and TensorBoard's (TFRecord's) masking of it.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// One record's bytes around an Event's encoding.
std::string tensorboard_record(const std::string& event);

// The encodings of the Events xf-train writes.
std::string file_version_event(double wall_time);                  // "brain.Event:2"
std::string session_start_event(double wall_time, int64_t step);    // SessionLog START
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

// One run's event file, events.out.tfevents.<seconds>.<host>.<pid>.<n> in `dir`: a new file for each
// start of the run, which begins with a session START at the first step it will write
// (first_step + 1): TensorBoard then drops the points of earlier files from that step on, those
// of a run that went on past its checkpoint before it was stopped. Appends as it goes; flush() after each
// validation and at the end, so that a killed run keeps what its last flush held.
class TensorBoardWriter {
 public:
  TensorBoardWriter(const std::string& dir, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(int64_t step, const std::string& tag, float value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The file names TensorBoard reads: "events.out.tfevents." followed by anything.
bool is_tensorboard_event_file(const std::string& file_name);

}  // namespace xf::trainer
