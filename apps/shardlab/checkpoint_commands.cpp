// `shardlab export` and `shardlab inspect`: thin wrappers printing what the checkpoint API does.
#include "apps/shardlab/checkpoint_commands.hpp"

#include <cstdio>
#include <iomanip>

#include "core/base/dtype.hpp"
#include "core/base/error.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/hf_safetensors.hpp"
#include "core/checkpoint/load.hpp"
#include "core/memory/tracker.hpp"

namespace shardlab {

int export_command(const std::string& ckpt_dir, const std::string& out_path,
                   const std::string& dtype_text, std::ostream& out, std::ostream& err,
                   bool hf_dir) {
  DType dtype;
  try {
    dtype = parse_dtype(dtype_text);
  } catch (const Error& e) {
    err << "shardlab export: " << e.what() << "\n";
    return 2;
  }
  if (dtype != DType::f32 && dtype != DType::bf16) {
    err << "shardlab export: --dtype " << dtype_text << ": use f32 or bf16\n";
    return 2;
  }
  try {
    InputScope inputs;  // the checkpoint's files: the output may not land on one of them
    // With hf_dir a save_pretrained directory (made if absent), else one .safetensors file.
    if (!hf_dir) checked_output_path(out_path, "output");  // before reading: /dev/null refused
    std::string note;
    std::string dir = resolve_checkpoint(ckpt_dir, &note);
    if (!note.empty()) err << "shardlab export: note: " << note << "\n";
    int n = hf_dir ? export_hf_directory(dir, out_path, dtype)
                   : export_safetensors(dir, out_path, dtype);
    out << "exported " << n << " tensors (" << dtype_name(dtype) << ") from " << dir << " to "
        << out_path << (hf_dir ? " (model.safetensors and config.json)" : "") << "\n";
    return 0;
  } catch (const Error& e) {
    err << "shardlab export: " << e.what() << "\n";
    return 1;
  }
}

namespace {

std::string chunk_ranges(const std::vector<CkptChunk>& chunks) {
  std::string s;
  for (const auto& c : chunks) {
    if (!s.empty()) s += " ";
    s += c.file + "[" + std::to_string(c.begin) + "," + std::to_string(c.begin + c.count) + ")";
  }
  return s;
}

}  // namespace

int inspect_command(const std::string& ckpt_dir, std::ostream& out, std::ostream& err) {
  try {
    std::string note;
    CheckpointReader reader(resolve_checkpoint(ckpt_dir, &note));
    const CheckpointIndex& ix = reader.index();
    const CheckpointMeta& m = ix.meta;
    int64_t params = 0, bytes = 0;  // the index checked that these sums fit
    for (const auto& t : ix.tensors) params += t.numel;
    for (const auto& f : ix.files) bytes += f.bytes;
    out << "checkpoint  " << reader.dir() << "\n";
    if (!note.empty()) out << "note        " << note << "\n";
    // Given a root, say what interrupted saves left there (nothing loads them).
    if (reader.dir() != ckpt_dir)
      for (const auto& l : checkpoint_leftovers(ckpt_dir))
        out << "leftover    " << describe_leftover(l) << "\n";
    out << "step        " << m.step << " (optimizer step " << m.optimizer_step << ")\n";
    out << "saved by    " << m.world_size << " ranks, strategy " << m.strategy << "\n";
    out << "model       " << m.model_config.dump() << "\n";
    out << "loader      " << m.loader.dump() << "\n";
    out << "rng         " << m.rng.dump() << "\n";
    out << "states     ";
    for (const auto& s : ix.states) out << " " << s;
    out << "\n";
    out << "files       " << ix.files.size() << ", " << format_bytes(bytes) << ":";
    for (const auto& f : ix.files) out << " " << f.name << " (" << format_bytes(f.bytes) << ")";
    out << "\n";
    out << "tensors     " << ix.tensors.size() << ", " << params << " parameters\n";
    // Where each tensor's parameters live (the first state when there are no params).
    std::string shown = ix.states.empty() ? "" : ix.states.front();
    for (const auto& s : ix.states)
      if (s == kStateParams) shown = s;
    size_t w = 4;
    for (const auto& t : ix.tensors) w = std::max(w, t.name.size());
    out << "  " << std::left << std::setw(static_cast<int>(w)) << "name"
        << "  " << std::setw(14) << "shape"
        << "  unit  " << shown << " held in\n";
    for (const auto& t : ix.tensors)
      out << "  " << std::setw(static_cast<int>(w)) << t.name << "  " << std::setw(14)
          << format_shape(t.shape) << "  " << std::setw(4) << t.unit << "  "
          << (shown.empty() ? "" : chunk_ranges(t.chunks.at(shown))) << "\n";
    std::vector<std::string> problems = reader.verify_all();
    int chunks = 0;
    for (const auto& t : ix.tensors)
      for (const auto& [s, c] : t.chunks) chunks += static_cast<int>(c.size());
    if (problems.empty()) {
      out << "checksums   ok (" << chunks << " ranges, " << format_bytes(bytes) << " read)\n";
      return 0;
    }
    out << "checksums   FAILED (" << problems.size() << " problems)\n";
    for (const auto& p : problems) err << "shardlab inspect: " << p << "\n";
    return 1;
  } catch (const Error& e) {
    err << "shardlab inspect: " << e.what() << "\n";
    return 1;
  }
}

int export_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> pos;
  std::string dtype = "f32";
  bool hf_dir = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--hf-dir") {
      hf_dir = true;
    } else if (args[i] == "--dtype" && i + 1 < args.size()) {
      dtype = args[++i];
    } else if (args[i].rfind("--dtype=", 0) == 0) {
      dtype = args[i].substr(8);
    } else if (!args[i].empty() && args[i][0] == '-') {
      err << "shardlab export: unknown option " << args[i] << "\n";
      return 2;
    } else {
      pos.push_back(args[i]);
    }
  }
  if (pos.size() != 2) {
    err << "usage: shardlab export CKPT_DIR OUT.safetensors [--dtype f32|bf16] [--hf-dir]\n";
    return 2;
  }
  return export_command(pos[0], pos[1], dtype, out, err, hf_dir);
}

int inspect_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.size() != 1 || (!args[0].empty() && args[0][0] == '-')) {
    err << "usage: shardlab inspect CKPT_DIR\n";
    return 2;
  }
  return inspect_command(args[0], out, err);
}

}  // namespace shardlab
