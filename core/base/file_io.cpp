// POSIX implementation of the file helpers (open/pread/fsync/rename).
#include "core/base/file_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/base/error.hpp"

namespace shardlab {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) SL_THROW(IoError, path, ": cannot open for reading: ", errno_text());
  return FileHandle(fd, path);
}

FileHandle FileHandle::create(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) SL_THROW(IoError, path, ": cannot create: ", errno_text());
  return FileHandle(fd, path);
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

void write_file_atomic(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    FileHandle f = FileHandle::create(tmp);
    f.write_all(text.data(), static_cast<int64_t>(text.size()));
    f.sync();
    f.close();
  }
  rename_path(tmp, path);
  sync_dir(parent_dir(path));
}

std::string read_text_file(const std::string& path) {
  FileHandle f = FileHandle::open_read(path);
  std::string s(static_cast<size_t>(f.size()), '\0');
  f.read_at(s.data(), static_cast<int64_t>(s.size()), 0);
  return s;
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
