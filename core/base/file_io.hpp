// POSIX file helpers (checkpoints, run directories, token files): whole writes with fsync,
// positioned reads, directory fsync, atomic file replacement. Every failure is an IoError naming
// the path and errno's text.
//
// What the project reads and where it writes goes through here, under two rules:
//  - inputs: FileHandle::open_read (and read_text_file, which uses it) opens only regular files.
//    A FIFO, a device, a socket or a directory is named and refused at once, never blocked on
//    (the open is non-blocking, then fstat decides). Inside an InputScope, every file read is
//    remembered by identity (st_dev, st_ino).
//  - outputs: AtomicFile (and write_file_atomic, which uses it) writes a temporary file beside
//    the destination and renames it over the destination only when complete. The destination
//    must be absent or a regular file (a symbolic link must lead to one, and its target is what
//    gets replaced), and never one of the open InputScope's inputs. So `/dev/null`, a FIFO, a
//    directory or the checkpoint a command is reading are refused, never replaced.
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

  // Opens a regular file for reading; IoError when it cannot, or when `path` is anything else
  // (FIFO, device, socket, directory: refused without blocking). Inside an InputScope, the file
  // joins the scope's inputs.
  static FileHandle open_read(const std::string& path);
  // Creates (or truncates) a file for writing in a directory the project made (a checkpoint's
  // temporary directory): refuses a path that exists and is not a regular file, and a symbolic
  // link. A file the user names is written with AtomicFile instead.
  static FileHandle create(const std::string& path);
  // Opens for appending, creating it if absent (a run directory's rank files): the same refusals
  // as create().
  static FileHandle open_append(const std::string& path);
  // Gives up ownership of the descriptor (for fdopen); the handle is then closed.
  int release();

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

// The files one command reads, remembered while it runs so that none of its outputs lands on one
// of them (`shardlab export ck ck/step-4/index.json`). A command that writes files the user names
// opens one scope for its duration; FileHandle::open_read adds each file it opens, AtomicFile
// refuses a destination among them. Scopes nest (the outermost one owns the set); the set is
// process-wide, so a command's rank threads share it.
class InputScope {
 public:
  InputScope();
  ~InputScope();
  InputScope(const InputScope&) = delete;
  InputScope& operator=(const InputScope&) = delete;
};

// Throws IoError unless `path` may be replaced by a new file: absent, or a regular file (through
// any symbolic links) that is not one of the open InputScope's inputs. Returns the path to write:
// `path`, or the regular file its symbolic links lead to. `what` names the output in messages
// ("--out", "export"); empty: the path alone.
std::string checked_output_path(const std::string& path, const std::string& what = "");

// A new version of a file, written beside it and swapped in when complete: checked_output_path,
// then <path>.tmp-<pid> written, commit() = fsync, rename over the destination, fsync of the
// directory. Readers see the old content or the new one, never a mix; a writer destroyed without
// commit() removes its temporary file and leaves the destination as it was.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path, const std::string& what = "");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write_all(const void* data, int64_t bytes) { file_.write_all(data, bytes); }
  void commit();
  // The destination (after symbolic links).
  const std::string& path() const { return path_; }

 private:
  std::string what_;
  std::string path_;
  std::string tmp_;
  FileHandle file_;
  bool committed_ = false;
};

// fsync of a directory: makes the creation, rename or removal of its entries durable.
void sync_dir(const std::string& dir);
// `text` into `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const std::string& text,
                       const std::string& what = "");
// A regular file's whole content (through open_read). A file larger than `max_bytes` is refused
// before anything is allocated, naming the bound.
inline constexpr int64_t kMaxTextFileBytes = int64_t(1) << 30;
std::string read_text_file(const std::string& path, int64_t max_bytes = kMaxTextFileBytes);
// Bytes [offset, end) of a regular file (through open_read); "" when offset is at or past the end.
std::string read_file_from(const std::string& path, int64_t offset,
                           int64_t max_bytes = kMaxTextFileBytes);
// What a path is, for messages: "a FIFO", "a directory", "a character device", ...
std::string file_type_name(unsigned mode);

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_dirs(const std::string& path);   // mkdir -p
void remove_all(const std::string& path);  // rm -rf; a missing path is fine
void rename_path(const std::string& from, const std::string& to);
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted
std::string join_path(const std::string& a, const std::string& b);
std::string parent_dir(const std::string& path);

}  // namespace shardlab
