// POSIX implementation of the file helpers (open/pread/fsync/rename).
#include "core/base/file_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
std::string errno_text() { return std::strerror(errno); }

// ---- the open InputScope's inputs, by identity
struct Inputs {
  std::mutex mu;
  int depth = 0;  // open scopes
  std::set<std::pair<dev_t, ino_t>> files;
};
Inputs& inputs() {
  static Inputs* in = new Inputs();  // never destroyed: rank threads may outlive main's statics
  return *in;
}
void remember_input(const struct stat& st) {
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mu);
  if (in.depth > 0) in.files.insert({st.st_dev, st.st_ino});
}
bool is_input(const struct stat& st) {
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mu);
  return in.depth > 0 && in.files.count({st.st_dev, st.st_ino}) > 0;
}

// Opens `path` with `flags` | O_NONBLOCK | O_CLOEXEC, refuses anything but a regular file (the
// non-blocking open returns at once on a FIFO; fstat then names it), and clears O_NONBLOCK.
// `action` words the failure ("open for reading").
int open_regular(const std::string& path, int flags, const char* action, struct stat* st_out) {
  int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ELOOP && (flags & O_NOFOLLOW))
      SL_THROW(IoError, path, ": cannot ", action, ": is a symbolic link");
    if (errno == ENXIO)  // O_WRONLY on a FIFO nobody reads
      SL_THROW(IoError, path, ": cannot ", action, ": is a FIFO, not a regular file");
    SL_THROW(IoError, path, ": cannot ", action, ": ", errno_text());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SL_THROW(IoError, path, ": stat failed: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    SL_THROW(IoError, path, ": cannot ", action, ": is ", file_type_name(st.st_mode),
             ", not a regular file");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    SL_THROW(IoError, path, ": fcntl failed: ", std::strerror(err));
  }
  if (st_out) *st_out = st;
  return fd;
}

// A path the project creates itself must be absent or a regular file, never a link.
void refuse_non_regular(const std::string& path, const char* action) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;  // absent (or unreachable: the open says why)
  if (S_ISLNK(st.st_mode)) SL_THROW(IoError, path, ": cannot ", action, ": is a symbolic link");
  if (!S_ISREG(st.st_mode))
    SL_THROW(IoError, path, ": cannot ", action, ": exists and is ", file_type_name(st.st_mode),
             ", not a regular file");
}
}  // namespace

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
  }
}

InputScope::InputScope() {
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mu);
  ++in.depth;
}

InputScope::~InputScope() {
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mu);
  if (--in.depth == 0) in.files.clear();
}

std::string checked_output_path(const std::string& path, const std::string& what) {
  const std::string name = what.empty() ? path : what + " " + path;
  if (path.empty()) SL_THROW(IoError, what.empty() ? "output" : what, ": empty path");
  struct stat lst;
  if (::lstat(path.c_str(), &lst) != 0) {
    if (errno == ENOENT) {  // a new name, in a directory that must exist
      const std::string dir = parent_dir(path);
      if (!is_directory(dir))
        SL_THROW(IoError, name, ": cannot write: the directory ", dir, " does not exist");
      return path;
    }
    SL_THROW(IoError, name, ": cannot write: ", errno_text());
  }
  std::string target = path;
  struct stat st = lst;
  if (S_ISLNK(lst.st_mode)) {
    if (::stat(path.c_str(), &st) != 0)
      SL_THROW(IoError, name, ": refusing to write: a symbolic link to nothing (", errno_text(),
               ")");
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) SL_THROW(IoError, name, ": cannot resolve the symbolic link: ", errno_text());
    target = real;
    std::free(real);
  }
  if (!S_ISREG(st.st_mode))
    SL_THROW(IoError, name, ": refusing to write: ",
             S_ISLNK(lst.st_mode) ? "a symbolic link to " : "exists and is ",
             file_type_name(st.st_mode),
             ", not a regular file (the project replaces only regular files)");
  if (is_input(st))
    SL_THROW(IoError, name, ": refusing to write: it is one of this command's inputs",
             S_ISLNK(lst.st_mode) ? " (through a symbolic link)" : "");
  return target;
}

FileHandle& FileHandle::operator=(FileHandle&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FileHandle FileHandle::open_read(const std::string& path) {
  struct stat st;
  const int fd = open_regular(path, O_RDONLY, "open for reading", &st);
  remember_input(st);
  return FileHandle(fd, path);
}

FileHandle FileHandle::create(const std::string& path) {
  refuse_non_regular(path, "create");
  return FileHandle(
      open_regular(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, "create", nullptr), path);
}

FileHandle FileHandle::open_append(const std::string& path) {
  refuse_non_regular(path, "open for appending");
  return FileHandle(
      open_regular(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, "open for appending", nullptr),
      path);
}

int FileHandle::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void FileHandle::write_all(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      SL_THROW(IoError, path_, ": write failed: ", errno_text());
    }
    p += n;
    bytes -= n;
  }
}

void FileHandle::read_at(void* out, int64_t bytes, int64_t offset) const {
  char* p = static_cast<char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    ssize_t n =
        ::pread(fd_, p + done, static_cast<size_t>(std::min<int64_t>(bytes - done, 1 << 30)),
                static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      SL_THROW(IoError, path_, ": read of ", bytes, " bytes at offset ", offset,
               " failed: ", errno_text());
    }
    if (n == 0)
      SL_THROW(IoError, path_, ": short read: wanted bytes [", offset, ", ", offset + bytes,
               ") but the file ends at ", offset + done, " (truncated?)");
    done += n;
  }
}

int64_t FileHandle::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) SL_THROW(IoError, path_, ": stat failed: ", errno_text());
  return static_cast<int64_t>(st.st_size);
}

void FileHandle::sync() {
  if (::fsync(fd_) != 0) SL_THROW(IoError, path_, ": fsync failed: ", errno_text());
}

void FileHandle::close() {
  if (fd_ < 0) return;
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) SL_THROW(IoError, path_, ": close failed: ", errno_text());
}

void sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) SL_THROW(IoError, dir, ": cannot open directory for fsync: ", errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); their renames are durable anyway.
  if (rc != 0 && err != EINVAL)
    SL_THROW(IoError, dir, ": directory fsync failed: ", std::strerror(err));
}

AtomicFile::AtomicFile(const std::string& path, const std::string& what)
    : what_(what), path_(checked_output_path(path, what)) {
  tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp_.c_str());  // this process's own leftover of an earlier failure, if any
  file_ = FileHandle::create(tmp_);
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    file_ = FileHandle();
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::commit() {
  file_.sync();
  file_.close();
  // Checked again just before the rename: the destination may have changed while we wrote.
  checked_output_path(path_, what_);
  rename_path(tmp_, path_);
  committed_ = true;
  sync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& text, const std::string& what) {
  AtomicFile f(path, what);
  f.write_all(text.data(), static_cast<int64_t>(text.size()));
  f.commit();
}

std::string read_file_from(const std::string& path, int64_t offset, int64_t max_bytes) {
  FileHandle f = FileHandle::open_read(path);
  const int64_t size = f.size();
  if (offset >= size) return std::string();
  if (size - offset > max_bytes)
    SL_THROW(IoError, path, ": ", size - offset, " bytes to read, more than the ", max_bytes,
             " this reader accepts (not a file this project wrote?)");
  std::string s(static_cast<size_t>(size - offset), '\0');
  f.read_at(s.data(), static_cast<int64_t>(s.size()), offset);
  return s;
}

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  return read_file_from(path, 0, max_bytes);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !is_directory(path))
    SL_THROW(IoError, path, ": cannot create directory: ", ec.message());
}

void remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) SL_THROW(IoError, path, ": cannot remove: ", ec.message());
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    SL_THROW(IoError, "cannot rename ", from, " to ", to, ": ", errno_text());
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) SL_THROW(IoError, dir, ": cannot list directory: ", errno_text());
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

}  // namespace shardlab
