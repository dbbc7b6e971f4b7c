#pragma once
// How a model file is opened (ModelFile::open, xf::Model::open): part of the public API.

namespace xf {

// map: memory-mapped, zero copy; the file must not be overwritten in place while it is open
// (replace it by renaming a new file over it: readers keep the old inode). read: read into
// memory once, so the file may change or go afterwards.
enum class FileAccess { map, read };

}  // namespace xf
