// NcclCommunicator: the Communicator contract on NCCL, with collectives on the device's comm
// stream (see nccl_comm.hpp for the stream and memory rules). Trace spans carry GPU times: each
// traced collective records start and end events, and the span is written once the end event has
// passed and the caller has waited on it (or dropped its Work).
#include "core/comm/cuda/nccl_comm.hpp"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "core/comm/comm_common.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/device/cuda/cuda_device.hpp"
#include "core/trace/nvtx.hpp"
#include "core/trace/recorder.hpp"

static_assert(sizeof(ncclUniqueId) == sizeof(shardlab::NcclId::bytes),
              "NcclId must hold an ncclUniqueId");

#define NCCL_CHECK(call) ::shardlab::nccl_check_result((call), #call, __FILE__, __LINE__)

namespace shardlab {

namespace {

void nccl_check_result(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  std::string what = std::string(ncclGetErrorString(r)) + " (ncclResult " +
                     std::to_string(static_cast<int>(r)) + ")";
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) what += ": " + std::string(last);
  detail::cuda_abort("NCCL", call, what.c_str(), file, line);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    default: return ncclFloat16;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclAvg; }

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One issued collective: its events, its flight record and, when traced, what its span will say.
// The host never blocks on a collective, so its flight record ends when the host first sees its
// end event passed (done(), the span written, or the Op released after it ran).
struct Op {
  int ordinal = 0;
  cudaEvent_t start = nullptr;  // timing events only when traced
  cudaEvent_t end = nullptr;
  CollectiveCall c;  // the call as Communicator checked and counted it
  FlightRecorder* flight = nullptr;
  int64_t t_issue = 0;
  std::atomic<int64_t> t_wait{-1};
  std::atomic<bool> released{false};  // waited on, blocking, or its Work is gone
  std::atomic<bool> ended{false};     // the flight record says done

  void mark_ended() {
    if (!ended.exchange(true)) flight->ended(c.seq, true, -1);
  }
  ~Op() {
    CudaDeviceGuard guard(ordinal);
    if (end && cudaEventQuery(end) == cudaSuccess) mark_ended();
    if (start) cudaEventDestroy(start);
    if (end) cudaEventDestroy(end);
  }
};

class NcclWork final : public Work::State {
 public:
  NcclWork(CudaDevice* dev, std::shared_ptr<Op> op) : dev_(dev), op_(std::move(op)) {}
  ~NcclWork() override { op_->released = true; }
  // A blocking call's wait is its own: no t_wait in its span.
  void wait() override {
    if (waited_) return;
    dev_->compute_waits_for(op_->end);
    waited_ = true;
    int64_t none = -1;
    if (op_->c.async) op_->t_wait.compare_exchange_strong(none, trace_now_ns());
    op_->released = true;
  }
  bool done() const override {
    CudaDeviceGuard guard(op_->ordinal);
    cudaError_t q = cudaEventQuery(op_->end);
    if (q == cudaErrorNotReady) return false;
    CUDA_CHECK(q);
    op_->mark_ended();
    return true;
  }

 private:
  CudaDevice* dev_;
  std::shared_ptr<Op> op_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, CudaDevice& dev, int rank, int size)
      : Communicator(rank, size), comm_(comm), dev_(dev) {
    // Fed as every backend's (Communicator); no watchdog reads it on nccl yet.
    flight_ = std::make_shared<FlightRecorder>(rank);
  }

  ~NcclCommunicator() override {
    CudaDeviceGuard guard(dev_.ordinal());
    sync_comm_stream();
    emit_spans(true);
    ncclCommDestroy(comm_);
    if (anchor_) cudaEventDestroy(anchor_);
  }

  const char* backend() const override { return "nccl"; }

 private:
  // NCCL reads and writes device memory only; a host pointer would fault inside a kernel.
  void check_call(const CollectiveCall& c) const override {
    if (c.count == 0) return;
    check_device_ptr(c.op, c.send == c.recv ? "buf" : "send", c.send);
    if (c.recv != c.send) check_device_ptr(c.op, "recv", c.recv);
  }

  Work start(const CollectiveCall& c) override {
    if (c.op == CommOp::barrier) {
      barrier_on_stream();
      flight_->ended(c.seq, true, -1);
      return Work();
    }
    if (c.count == 0) {  // checked and counted, nothing to queue
      flight_->ended(c.seq, true, -1);
      return Work();
    }
    return issue(c);
  }

  // A one-float all-reduce on the comm stream, waited for by the host.
  void barrier_on_stream() {
    NvtxRange range("barrier");
    CudaDeviceGuard guard(dev_.ordinal());
    Buffer token = dev_.alloc_zeros(sizeof(float), MemCategory::comm_buffers);
    dev_.comm_waits_for_compute();
    dev_.record_stream(token.data(), dev_.comm_stream());
    NCCL_CHECK(ncclAllReduce(token.data(), token.data(), 1, ncclFloat32, ncclSum, comm_,
                             dev_.comm_stream()));
    sync_comm_stream();
    emit_spans(false);
  }

  std::unique_ptr<Communicator> start_split(const CollectiveCall& c, int color, int key,
                                            const std::vector<int>*) override {
    CudaDeviceGuard guard(dev_.ordinal());
    ncclComm_t sub = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    SL_CHECK(sub != nullptr, "nccl split: colour ", color, " gave no communicator");
    int r = 0, n = 0;
    NCCL_CHECK(ncclCommUserRank(sub, &r));
    NCCL_CHECK(ncclCommCount(sub, &n));
    auto sc = std::make_unique<NcclCommunicator>(sub, dev_, r, n);
    sc->flight_ = flight_;
    flight_->ended(c.seq, true, -1);
    return sc;
  }

  void check_device_ptr(CommOp op, const char* what, const void* p) const {
    const char* name = comm_op_name(op);
    cudaPointerAttributes attr{};
    cudaError_t e = cudaPointerGetAttributes(&attr, p);
    if (e != cudaSuccess) {
      cudaGetLastError();
      SL_THROW(InvalidArgument, "nccl ", name, ": ", what, " is not CUDA memory (",
               cudaGetErrorString(e), ")");
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
      SL_THROW(InvalidArgument, "nccl ", name, ": ", what,
               " is host memory; the nccl backend "
               "needs device buffers (allocate them with the rank's CUDA device)");
    if (attr.device != dev_.ordinal())
      SL_THROW(InvalidArgument, "nccl ", name, ": ", what, " lives on GPU ", attr.device,
               " but this rank's communicator is on GPU ", dev_.ordinal());
  }

  // Queues the NCCL call of `c` (count > 0) on the comm stream.
  void launch(const CollectiveCall& c) {
    const size_t n = static_cast<size_t>(c.count);
    const ncclDataType_t t = nccl_type(c.dtype);
    const cudaStream_t s = dev_.comm_stream();
    switch (c.op) {
      case CommOp::all_gather: NCCL_CHECK(ncclAllGather(c.send, c.recv, n, t, comm_, s)); break;
      case CommOp::reduce_scatter:
        NCCL_CHECK(ncclReduceScatter(c.send, c.recv, n, t, nccl_op(c.reduce), comm_, s));
        break;
      case CommOp::all_reduce:
        NCCL_CHECK(ncclAllReduce(c.send, c.recv, n, t, nccl_op(c.reduce), comm_, s));
        break;
      case CommOp::broadcast:
        NCCL_CHECK(ncclBroadcast(c.send, c.recv, n, t, c.root, comm_, s));
        break;
      default: SL_THROW(Error, "nccl: ", comm_op_name(c.op), " is not a collective to launch");
    }
  }

  // One collective, checked and counted by Communicator: the events around its launch on the comm
  // stream, and when traced a span written once it has run (emit_spans).
  Work issue(const CollectiveCall& c) {
    NvtxRange range(comm_op_name(c.op));
    CudaDeviceGuard guard(dev_.ordinal());
    emit_spans(false);
    const bool traced = tracing(recorder_);
    auto op = std::make_shared<Op>();
    op->ordinal = dev_.ordinal();
    op->c = c;
    op->flight = flight_.get();
    op->t_issue = traced ? trace_now_ns() : 0;
    CUDA_CHECK(
        cudaEventCreateWithFlags(&op->end, traced ? cudaEventDefault : cudaEventDisableTiming));
    if (traced) {
      CUDA_CHECK(cudaEventCreateWithFlags(&op->start, cudaEventDefault));
      anchor_clock();
    }

    dev_.comm_waits_for_compute();
    dev_.record_stream(c.send, dev_.comm_stream());
    if (c.recv != c.send) dev_.record_stream(c.recv, dev_.comm_stream());
    if (traced) CUDA_CHECK(cudaEventRecord(op->start, dev_.comm_stream()));
    launch(c);
    CUDA_CHECK(cudaEventRecord(op->end, dev_.comm_stream()));
    if (traced) pending_.push_back(op);
    return Work(std::make_shared<NcclWork>(&dev_, op));
  }

  // Pairs a GPU event with the host clock, so event times can be written on the trace clock.
  // Done when the comm stream is idle (first traced collective, each barrier).
  // Re-anchored every kAnchorNs while no span is pending: event times are float milliseconds.
  void anchor_clock() {
    constexpr int64_t kAnchorNs = 10'000'000'000;
    if (anchor_ && (!pending_.empty() || steady_ns() - anchor_steady_ns_ < kAnchorNs)) return;
    sync_comm_stream();
    emit_spans(false);
    if (!pending_.empty()) return;  // spans still held by their Work keep the old anchor
    if (!anchor_) CUDA_CHECK(cudaEventCreateWithFlags(&anchor_, cudaEventDefault));
    CUDA_CHECK(cudaEventRecord(anchor_, dev_.comm_stream()));
    CUDA_CHECK(cudaEventSynchronize(anchor_));
    anchor_steady_ns_ = steady_ns();
  }

  // Nanoseconds on the trace clock `ms` milliseconds after the anchor event.
  int64_t anchor_trace_ns(float ms) const {
    const int64_t steady = anchor_steady_ns_ + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    return steady + (trace_now_ns() - steady_ns());  // steady clock -> trace clock
  }

  // Writes the spans of finished collectives, in issue order. `all`: the stream is idle, write
  // every span even if its Work is still held.
  void emit_spans(bool all) {
    while (!pending_.empty()) {
      Op& op = *pending_.front();
      if (!all) {
        if (!op.released) break;
        cudaError_t q = cudaEventQuery(op.end);
        if (q == cudaErrorNotReady) break;
        CUDA_CHECK(q);
      }
      if (tracing(recorder_)) {
        float to_start = 0.0f, duration = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&to_start, anchor_, op.start));
        CUDA_CHECK(cudaEventElapsedTime(&duration, op.start, op.end));
        CommTimes times;
        times.t_issue = op.t_issue;
        times.t_start = anchor_trace_ns(to_start);
        times.t_end = times.t_start + static_cast<int64_t>(static_cast<double>(duration) * 1e6);
        times.t_wait = op.t_wait.load();
        record_comm_span(recorder_, op.c, times);
      }
      op.mark_ended();
      pending_.pop_front();
    }
  }

  // Waits for the comm stream while watching NCCL for asynchronous errors (a peer that died
  // would otherwise leave this rank waiting forever).
  void sync_comm_stream() {
    for (;;) {
      cudaError_t q = cudaStreamQuery(dev_.comm_stream());
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) CUDA_CHECK(q);
      ncclResult_t async_err = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_err));
      NCCL_CHECK(async_err);
      std::this_thread::yield();
    }
  }

  ncclComm_t comm_;
  CudaDevice& dev_;
  std::deque<std::shared_ptr<Op>> pending_;  // traced collectives whose span is not written yet
  cudaEvent_t anchor_ = nullptr;
  int64_t anchor_steady_ns_ = 0;
};

CudaDevice& nccl_device(Device& dev) {
  if (dev.kind() != DeviceKind::cuda)
    SL_THROW(Error, "the nccl backend needs a CUDA device (--device cuda), got ",
             device_kind_name(dev.kind()));
  return static_cast<CudaDevice&>(dev);
}

}  // namespace

NcclId nccl_unique_id() {
  ncclUniqueId raw;
  NCCL_CHECK(ncclGetUniqueId(&raw));
  NcclId id;
  std::memcpy(id.bytes.data(), &raw, sizeof raw);
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(Device& dev, const NcclId& id, int rank,
                                                     int world) {
  CudaDevice& cuda = nccl_device(dev);
  SL_CHECK(world >= 1 && rank >= 0 && rank < world, "nccl: rank ", rank, " of world ", world);
  CudaDeviceGuard guard(cuda.ordinal());
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes.data(), sizeof raw);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, world, raw, rank));
  return std::make_unique<NcclCommunicator>(comm, cuda, rank, world);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device*>& devices) {
  SL_CHECK(!devices.empty(), "nccl: no devices");
  const int n = static_cast<int>(devices.size());
  std::vector<int> ordinals;
  for (Device* d : devices) {
    int o = nccl_device(*d).ordinal();
    for (int seen : ordinals)
      SL_CHECK(seen != o, "nccl: GPU ", o, " given twice (NCCL needs one GPU per rank)");
    ordinals.push_back(o);
  }
  std::vector<ncclComm_t> comms(devices.size());
  NCCL_CHECK(ncclCommInitAll(comms.data(), n, ordinals.data()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[r], nccl_device(*devices[r]), r, n));
  return out;
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace shardlab
