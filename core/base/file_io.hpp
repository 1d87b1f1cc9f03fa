// POSIX file helpers (checkpoints, run directories, token files): whole writes with fsync,
// positioned reads, directory fsync, atomic small-file replacement. Every failure is an IoError
// naming the path and errno's text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

// An open file descriptor, closed on destruction. Move-only.
class FileHandle {
 public:
  FileHandle() = default;
  FileHandle(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  FileHandle(FileHandle&& o) noexcept { *this = std::move(o); }
  FileHandle& operator=(FileHandle&& o) noexcept;
  ~FileHandle();

  // Opens for reading; IoError when it cannot.
  static FileHandle open_read(const std::string& path);
  // Creates (or truncates) for writing.
  static FileHandle create(const std::string& path);

  void write_all(const void* data, int64_t bytes);
  // Reads exactly `bytes` at `offset`; IoError "path: short read" when the file ends first.
  void read_at(void* out, int64_t bytes, int64_t offset) const;
  int64_t size() const;
  void sync();   // fsync: the data is on disk when this returns
  void close();  // closes now, reporting a failed close as IoError

  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
};

// fsync of a directory: makes the creation, rename or removal of its entries durable.
void sync_dir(const std::string& dir);
// Writes `text` to path through path.tmp-<pid>, fsync, rename, fsync of the parent directory:
// readers see the old content or the new one, never a mix.
void write_file_atomic(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_dirs(const std::string& path);   // mkdir -p
void remove_all(const std::string& path);  // rm -rf; a missing path is fine
void rename_path(const std::string& from, const std::string& to);
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted
std::string join_path(const std::string& a, const std::string& b);
std::string parent_dir(const std::string& path);

}  // namespace shardlab
