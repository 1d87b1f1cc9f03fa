// What every benchmark binary says about itself next to Google Benchmark: `--help` lists the
// program's own flags (one line each, with its default) before Google Benchmark's, and the
// "Library was built as DEBUG" notice of Debian's libbenchmark gets one line saying whose build
// that is. The JSON output is untouched (bench/report.py reads it).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "core/base/error.hpp"

namespace shardlab::bench {

// "tiny,small" -> {"tiny", "small"}; empty items are dropped.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The integer value of a flag, at least `lowest`; anything else is an InvalidArgument naming it
// ("--ranks=x: expected an integer >= 1").
inline int int_flag(const char* flag, const std::string& v, int lowest) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || x < lowest)
    SL_THROW(InvalidArgument, flag, "=", v, ": expected an integer >= ", lowest);
  return x;
}

struct OwnFlag {
  const char* flag;  // "--ranks=1,2,4,8": the flag with its default value
  const char* help;  // one line
};

// With `--help` among the arguments, prints "<program>: <summary>", the program's own flags and a
// heading for Google Benchmark's, which benchmark::Initialize then prints before it exits.
inline void print_help_if_asked(int argc, char** argv, const char* program, const char* summary,
                                std::initializer_list<OwnFlag> flags) {
  bool asked = false;
  for (int i = 1; i < argc; ++i) asked = asked || std::strcmp(argv[i], "--help") == 0;
  if (!asked) return;
  std::printf("%s: %s\n\n", program, summary);
  if (flags.size() == 0) {
    std::printf("%s has no flags of its own.\n", program);
  } else {
    std::printf("%s's own flags (the value shown is the default; lists are comma-separated):\n",
                program);
    for (const OwnFlag& f : flags) std::printf("  %-24s %s\n", f.flag, f.help);
  }
  std::printf(
      "\nGoogle Benchmark's flags (e.g. --benchmark_filter=<regex> "
      "--benchmark_out=<file> --benchmark_out_format=json):\n");
  std::fflush(stdout);
}

// Debian 12's libbenchmark (1.7.1) is compiled without NDEBUG, so its console reporter starts
// every run with "***WARNING*** Library was built as DEBUG. Timings may be affected." on
// std::cerr. That is the library's build, not this program's: this filter on std::cerr passes
// every character through unchanged and, after the first line that carries the notice, adds one
// line saying so. Installed once per process; std::cerr gets its buffer back at exit.
class LibraryNoticeFilter : public std::streambuf {
 public:
  static void install() { static LibraryNoticeFilter filter; }

 private:
  LibraryNoticeFilter() : target_(std::cerr.rdbuf()) { std::cerr.rdbuf(this); }
  ~LibraryNoticeFilter() override { std::cerr.rdbuf(target_); }

  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    if (traits_type::eq_int_type(target_->sputc(traits_type::to_char_type(c)), traits_type::eof()))
      return traits_type::eof();
    if (c != '\n') {
      if (line_.size() < 256) line_.push_back(traits_type::to_char_type(c));
      return c;
    }
    if (!explained_ && line_.find("Library was built as DEBUG") != std::string::npos) {
      explained_ = true;
      static const char kNote[] =
          "(That is Debian's libbenchmark package, built without NDEBUG, not ShardLab: this "
#ifdef NDEBUG
          "binary's own code is optimized, NDEBUG defined.)\n";
#else
          "binary's own code is a debug build too, NDEBUG not defined.)\n";
#endif
      target_->sputn(kNote, sizeof(kNote) - 1);
    }
    line_.clear();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i)
      if (traits_type::eq_int_type(overflow(traits_type::to_int_type(s[i])), traits_type::eof()))
        return i;
    return n;
  }
  int sync() override { return target_->pubsync(); }

  std::streambuf* target_;
  std::string line_;
  bool explained_ = false;
};

inline void explain_library_notice() { LibraryNoticeFilter::install(); }

// benchmark::Initialize with both of the above.
inline void initialize(int* argc, char** argv, const char* program, const char* summary,
                       std::initializer_list<OwnFlag> flags = {}) {
  print_help_if_asked(*argc, argv, program, summary, flags);
  explain_library_notice();
  benchmark::Initialize(argc, argv);
}

}  // namespace shardlab::bench
