#include "tools/inspect.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alloc/size_class.h"
#include "runtime/runtime.h"
#include "tools/bytes_format.h"
#include "tools/json_writer.h"
#include "tools/kv_store.h"
#include "tools/pool_view.h"

namespace pmrt::tools {

const char kInspectUsage[] =
    "       pmrt info POOL [--json] [--layout NAME] [--index NAME]\n"
    "       pmrt check POOL [--layout NAME]\n"
    "       pmrt dump POOL [--limit N] [--from KEY] [--hex | --json] [--layout NAME] "
    "[--index NAME]\n"
    "       pmrt grow POOL SIZE|+BYTES [--layout NAME]   (K, M, G suffixes)\n"
    "       pmrt repair POOL   (empties a key-value pool's failed-epoch set)\n"
    "  (without --layout: a key-value pool, or a pmrt::Runtime's; --index names one of a\n"
    "   runtime's indexes)\n";

namespace {

// The parsed command line of one subcommand: the pool path and the flags it allows.
struct Args {
  std::string pool;
  std::string layout;  // empty: the key-value layout, or a runtime's when the pool has it
  std::string index;
  bool json = false, hex = false;
  uint64_t limit = 100;
  std::optional<std::string> from;
};

// Parses `args` allowing the flags in `allowed` (a space-separated list such as "--json
// --layout"); on a usage error prints it and returns nullopt.
std::optional<Args> Parse(const char* cmd, const std::vector<std::string>& args,
                          std::string_view allowed) {
  Args a;
  auto usage = [&](const std::string& what) -> std::optional<Args> {
    std::fprintf(stderr, "pmrt %s: %s\nusage:\n%s", cmd, what.c_str(), kInspectUsage);
    return std::nullopt;
  };
  auto allows = [&](std::string_view flag) {
    for (std::string_view rest = allowed; !rest.empty();) {
      const size_t sp = rest.find(' ');
      if (rest.substr(0, sp) == flag) return true;
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    }
    return false;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      if (!a.pool.empty()) return usage(absl::StrCat("unexpected argument ", arg));
      a.pool = arg;
      continue;
    }
    if (!allows(arg)) return usage(absl::StrCat("unknown option ", arg));
    const bool takes_value =
        arg == "--layout" || arg == "--limit" || arg == "--from" || arg == "--index";
    if (takes_value && i + 1 == args.size()) return usage(absl::StrCat(arg, " needs a value"));
    if (arg == "--json") {
      a.json = true;
    } else if (arg == "--hex") {
      a.hex = true;
    } else if (arg == "--layout") {
      a.layout = args[++i];
    } else if (arg == "--index") {
      a.index = args[++i];
    } else if (arg == "--limit") {
      if (!absl::SimpleAtoi(args[++i], &a.limit)) {
        return usage(absl::StrCat("--limit needs a number, not ", args[i]));
      }
    } else if (arg == "--from") {
      a.from = UnescapeBytes(args[++i]);
      if (!a.from.has_value()) {
        return usage(
            absl::StrCat("--from ", args[i], ": bad escape (use \\\\, \\t, \\n, \\r, \\xHH)"));
      }
    }
  }
  if (a.pool.empty()) return usage("missing POOL");
  if (a.json && a.hex) return usage("--hex and --json exclude each other");
  return a;
}

// Opens the pool; on failure prints the one-line error and sets *exit_status.
// `writable`: PoolView::Open's (for grow).
std::unique_ptr<PoolView> OpenOrReport(const char* cmd, const Args& a, int* exit_status,
                                       bool writable = false) {
  auto view = PoolView::Open(a.pool, a.layout.empty() ? kKvLayout : a.layout, a.index, writable);
  if (!view.ok() && a.layout.empty() &&
      view.status().message().find(absl::StrCat("pool layout is '", kRuntimeLayout, "'")) !=
          std::string_view::npos) {
    view = PoolView::Open(a.pool, kRuntimeLayout, a.index, writable);  // a pmrt::Runtime's pool
  }
  if (view.ok()) return std::move(*view);
  // Pool errors already start with the path; others (none today) get it prepended.
  std::string msg(view.status().message());
  if (msg.rfind(a.pool, 0) != 0) msg = absl::StrCat(a.pool, ": ", msg);
  if (msg.find("in use") != std::string::npos) {
    msg += " (one process at a time: stop the one that holds it, e.g. pmrt serve, first)";
  }
  std::fprintf(stderr, "pmrt %s: %s\n", cmd, msg.c_str());
  *exit_status = ExitStatusForOpenError(view.status());
  return nullptr;
}

std::string Ranges(const EpochRanges& ranges, size_t max_listed) {
  std::string out;
  const size_t skip = ranges.size() > max_listed ? ranges.size() - max_listed : 0;
  if (skip > 0) absl::StrAppend(&out, "... ");
  for (size_t i = skip; i < ranges.size(); ++i) {
    absl::StrAppend(&out, i > skip ? " " : "", ranges[i].first, "..", ranges[i].second);
  }
  return out;
}

// "N bytes (X.Y MiB)".
std::string Bytes(uint64_t n) {
  const double d = static_cast<double>(n);
  if (n >= (uint64_t{1} << 30)) return absl::StrFormat("%d bytes (%.1f GiB)", n, d / (1 << 30));
  if (n >= (uint64_t{1} << 20)) return absl::StrFormat("%d bytes (%.1f MiB)", n, d / (1 << 20));
  if (n >= (uint64_t{1} << 10)) return absl::StrFormat("%d bytes (%.1f KiB)", n, d / (1 << 10));
  return absl::StrCat(n, " bytes");
}

std::string Time(uint64_t ns) {
  const time_t secs = static_cast<time_t>(ns / 1000000000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string RecoveryLine(const PoolReport& r) {
  if (r.clean_shutdown) return "none needed (the last run closed the pool)";
  return absl::StrCat(
      "done in memory for this view (the file is unchanged; the next program "
      "that writes the pool recovers it): epochs ",
      Ranges(r.failed_at_open, 4), " recorded failed and rolled back, ", r.log_entries_replayed,
      " external-log entries replayed (the tree's in-line logs are repaired "
      "lazily, at each node's first access)");
}

void PrintText(const PoolReport& r) {
  std::printf("pool            %s\n", r.path.c_str());
  std::printf("format          %u.%u\n", r.format_major, r.format_minor);
  std::printf("layout          %s\n", r.layout.c_str());
  std::printf("size            %s", Bytes(r.size).c_str());
  if (r.created_size != r.size) std::printf(", grown from %s", Bytes(r.created_size).c_str());
  std::printf("\n");
  std::printf("uuid            %s\n", r.uuid.c_str());
  std::printf("created         %s\n", Time(r.create_time_ns).c_str());
  std::printf("backend         %s\n", r.backend.c_str());
  std::printf("last shutdown   %s\n",
              r.clean_shutdown ? "clean" : "CRASH (recovered in memory by this view)");
  std::printf("opens           %lu\n", static_cast<unsigned long>(r.open_count));
  for (const auto& g : r.regions) {
    std::printf("region %-8s offset %12lu  size %s\n", g.name, static_cast<unsigned long>(g.offset),
                Bytes(g.size).c_str());
  }
  if (!r.has_epochs) {
    std::printf("epochs          not initialized (no epoch layer in this pool)\n");
    return;
  }
  std::printf(
      "epochs          current %lu, completed %lu (was %lu before this open), this "
      "execution began at %lu\n",
      static_cast<unsigned long>(r.current), static_cast<unsigned long>(r.completed),
      static_cast<unsigned long>(r.completed_before),
      static_cast<unsigned long>(r.execution_first));
  std::printf("failed epochs   %zu range%s%s%s\n", r.failed.size(), r.failed.size() == 1 ? "" : "s",
              r.failed.empty() ? "" : ": ", Ranges(r.failed, 8).c_str());
  std::printf("recovery        %s\n", RecoveryLine(r).c_str());
  std::printf("external log    %lu blocks of %lu KiB, %lu free\n",
              static_cast<unsigned long>(r.log_blocks_total),
              static_cast<unsigned long>(r.log_block_size >> 10),
              static_cast<unsigned long>(r.log_blocks_free));
  if (!r.has_heap) {
    std::printf("heap            not formatted (no heap in this pool)\n");
    return;
  }
  const alloc::HeapStats& h = r.heap;
  std::printf("heap            %s: %s used in %lu blocks (%lu extents), %s free\n",
              Bytes(h.heap_bytes).c_str(), Bytes(h.used_bytes).c_str(),
              static_cast<unsigned long>(h.live_blocks), static_cast<unsigned long>(h.live_extents),
              Bytes(h.free_bytes).c_str());
  std::printf(
      "heap chunks     %lu of 64 KiB: %lu free, %lu small-block, %lu extent; largest free "
      "extent %s; %s free inside small-block chunks; %lu segment%s\n",
      static_cast<unsigned long>(h.chunks), static_cast<unsigned long>(h.free_chunks),
      static_cast<unsigned long>(h.small_chunks), static_cast<unsigned long>(h.extent_chunks),
      Bytes(h.largest_free_extent).c_str(), Bytes(h.free_in_small_chunks).c_str(),
      static_cast<unsigned long>(h.segments), h.segments == 1 ? "" : "s");
  std::string classes;
  for (int c = 0; c < alloc::SizeClasses::kCount; ++c) {
    if (h.live_per_class[c] == 0) continue;
    absl::StrAppend(&classes, classes.empty() ? "" : ", ", alloc::SizeClasses::kSizes[c], " B x ",
                    h.live_per_class[c]);
  }
  std::printf("heap classes    %s\n", classes.empty() ? "no small blocks" : classes.c_str());
  if (r.has_txn) {
    std::printf(
        "transactions    directory at offset %lu (committed transactions replayed at open)\n",
        static_cast<unsigned long>(r.txn_directory));
  }
  if (r.runtime) {
    std::string list;
    for (const auto& [name, keys] : r.indexes) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", EscapeBytes(name), " (", keys, " keys)");
    }
    std::printf("indexes         %zu%s%s\n", r.indexes.size(), list.empty() ? "" : ": ",
                list.c_str());
    if (!r.has_tree) return;
    std::printf("index           %s\n", EscapeBytes(r.index).c_str());
  } else if (!r.kv) {
    return;
  }
  if (!r.has_tree) {
    std::printf("tree            none yet (a key-value pool gets its tree at its first write)\n");
    return;
  }
  std::printf(
      "tree            %lu keys; height %d, %zu border and %zu interior nodes, %zu layers "
      "(descriptor at offset %lu)\n",
      static_cast<unsigned long>(r.keys), r.shape.height, r.shape.leaves, r.shape.interiors,
      r.shape.layers, static_cast<unsigned long>(r.tree_descriptor));
  if (!r.tree_error.empty()) {
    std::printf("tree check      FAILED: %s (run pmrt check)\n", r.tree_error.c_str());
  }
}

std::string Json(const PoolReport& r) {
  JsonWriter j;
  j.BeginObject();
  j.Key("path").Str(r.path).Key("format").BeginObject();
  j.Key("major").Uint(r.format_major).Key("minor").Uint(r.format_minor).EndObject();
  j.Key("layout").Str(r.layout).Key("size").Uint(r.size).Key("created_size").Uint(r.created_size);
  j.Key("uuid").Str(r.uuid);
  j.Key("create_time_ns").Uint(r.create_time_ns).Key("backend").Str(r.backend);
  j.Key("clean_shutdown").Bool(r.clean_shutdown).Key("open_count").Uint(r.open_count);
  j.Key("regions").BeginArray();
  for (const auto& g : r.regions) {
    j.BeginObject().Key("name").Str(g.name).Key("offset").Uint(g.offset);
    j.Key("size").Uint(g.size).EndObject();
  }
  j.EndArray();
  auto ranges = [&](const EpochRanges& v) {
    j.BeginArray();
    for (const auto& [lo, hi] : v) j.BeginArray().Uint(lo).Uint(hi).EndArray();
    j.EndArray();
  };
  j.Key("epochs");
  if (r.has_epochs) {
    j.BeginObject().Key("current").Uint(r.current).Key("completed").Uint(r.completed);
    j.Key("completed_before_open").Uint(r.completed_before);
    j.Key("execution_first").Uint(r.execution_first);
    j.Key("failed");
    ranges(r.failed);
    j.Key("failed_at_open");
    ranges(r.failed_at_open);
    j.Key("log_entries_replayed").Uint(r.log_entries_replayed).EndObject();
    j.Key("log").BeginObject().Key("blocks_total").Uint(r.log_blocks_total);
    j.Key("blocks_free").Uint(r.log_blocks_free).Key("block_size").Uint(r.log_block_size);
    j.EndObject();
  } else {
    j.Null().Key("log").Null();
  }
  j.Key("heap");
  if (r.has_heap) {
    const alloc::HeapStats& h = r.heap;
    j.BeginObject().Key("heap_bytes").Uint(h.heap_bytes).Key("used_bytes").Uint(h.used_bytes);
    j.Key("free_bytes").Uint(h.free_bytes).Key("largest_free_extent").Uint(h.largest_free_extent);
    j.Key("live_blocks").Uint(h.live_blocks).Key("live_extents").Uint(h.live_extents);
    j.Key("chunks").Uint(h.chunks).Key("free_chunks").Uint(h.free_chunks);
    j.Key("small_chunks").Uint(h.small_chunks).Key("extent_chunks").Uint(h.extent_chunks);
    j.Key("free_in_small_chunks").Uint(h.free_in_small_chunks).Key("segments").Uint(h.segments);
    j.Key("live_per_class").BeginObject();
    for (int c = 0; c < alloc::SizeClasses::kCount; ++c) {
      if (h.live_per_class[c] != 0) {
        j.Key(absl::StrCat(alloc::SizeClasses::kSizes[c])).Uint(h.live_per_class[c]);
      }
    }
    j.EndObject().EndObject();
  } else {
    j.Null();
  }
  j.Key("txn_directory");
  if (r.has_txn) {
    j.Uint(r.txn_directory);
  } else {
    j.Null();
  }
  j.Key("indexes");
  if (r.runtime) {
    j.BeginArray();
    for (const auto& [name, keys] : r.indexes) {
      j.BeginObject().Key("name").Str(name).Key("keys").Uint(keys).EndObject();
    }
    j.EndArray();
  } else {
    j.Null();
  }
  j.Key("tree");
  if (r.has_tree) {
    j.BeginObject().Key("keys").Uint(r.keys).Key("height").Int(r.shape.height);
    j.Key("leaves").Uint(r.shape.leaves).Key("empty_leaves").Uint(r.shape.empty_leaves);
    j.Key("interiors").Uint(r.shape.interiors).Key("layers").Uint(r.shape.layers);
    j.Key("descriptor").Uint(r.tree_descriptor).Key("check_error");
    if (r.tree_error.empty()) {
      j.Null();
    } else {
      j.Str(r.tree_error);
    }
    j.EndObject();
  } else {
    j.Null();
  }
  j.EndObject();
  return j.str();
}

// Closes the view; a failure to close (the pool could not be synced) fails the command.
int Finish(const char* cmd, PoolView& view, int status) {
  if (absl::Status st = view.Close(); !st.ok()) {
    std::fprintf(stderr, "pmrt %s: %s\n", cmd, std::string(st.message()).c_str());
    return kExitFailed;
  }
  return status;
}

}  // namespace

int InfoCommand(const std::vector<std::string>& args) {
  const auto a = Parse("info", args, "--json --layout --index");
  if (!a.has_value()) return kExitUsage;
  int status = kExitOk;
  auto view = OpenOrReport("info", *a, &status);
  if (view == nullptr) return status;
  const PoolReport r = view->Report();
  if (a->json) {
    std::printf("%s\n", Json(r).c_str());
  } else {
    PrintText(r);
  }
  // A tree that fails its check is a corrupt pool, whatever else info could show.
  return Finish("info", *view, r.tree_error.empty() ? kExitOk : kExitFailed);
}

int CheckCommand(const std::vector<std::string>& args) {
  const auto a = Parse("check", args, "--layout");
  if (!a.has_value()) return kExitUsage;
  int status = kExitOk;
  auto view = OpenOrReport("check", *a, &status);
  if (view == nullptr) return status;
  const CheckReport r = view->Check();
  if (r.healthy()) {
    std::printf("pmrt check: %s: healthy\n", a->pool.c_str());
  } else {
    std::printf("pmrt check: %s: UNHEALTHY, %zu problem%s\n", a->pool.c_str(), r.problems.size(),
                r.problems.size() == 1 ? "" : "s");
    for (const std::string& p : r.problems) std::printf("  problem  %s\n", p.c_str());
  }
  for (const std::string& p : r.passed) std::printf("  ok       %s\n", p.c_str());
  for (const std::string& p : r.skipped) std::printf("  skipped  %s\n", p.c_str());
  return Finish("check", *view, r.healthy() ? kExitOk : kExitFailed);
}

int DumpCommand(const std::vector<std::string>& args) {
  const auto a = Parse("dump", args, "--limit --from --hex --json --layout --index");
  if (!a.has_value()) return kExitUsage;
  int status = kExitOk;
  auto view = OpenOrReport("dump", *a, &status);
  if (view == nullptr) return status;
  if (!view->kv() && !view->runtime()) {
    std::fprintf(stderr,
                 "pmrt dump: %s: layout \"%s\" is not a key-value pool (layout \"%s\") or a "
                 "runtime's (layout \"%s\")\n",
                 a->pool.c_str(), a->layout.c_str(), kKvLayout, kRuntimeLayout);
    return Finish("dump", *view, kExitFailed);
  }
  if (view->tree() == nullptr && view->runtime()) {
    std::fprintf(stderr,
                 "pmrt dump: %s: name the index to dump (--index NAME; pmrt info lists "
                 "them)\n",
                 a->pool.c_str());
    return Finish("dump", *view, kExitUsage);
  }
  if (view->tree() == nullptr) {
    std::fprintf(stderr, "pmrt dump: %s: the pool holds no key-value tree yet\n", a->pool.c_str());
    return Finish("dump", *view, kExitOk);
  }
  // The structure is checked before anything is read through it (a corrupt pool's links may
  // point anywhere): a tree that fails is not walked. Values that fail their checksum are named
  // on stderr and left out, never printed as if they were the data written.
  // The structure alone: the scan below compares each value with its checksum once.
  if (absl::Status st = view->tree()->CheckInvariants(nullptr, nullptr, /*values=*/false);
      !st.ok()) {
    std::fprintf(stderr, "pmrt dump: %s: the tree fails its check, nothing dumped: %s\n",
                 a->pool.c_str(), std::string(st.message()).c_str());
    return Finish("dump", *view, kExitFailed);
  }
  // One key past the limit tells whether more follow (and which key to continue --from).
  const size_t limit = a->limit == 0 ? SIZE_MAX : static_cast<size_t>(a->limit);
  size_t shown = 0, bad = 0;
  std::optional<std::string> next;
  const ds::DurableMasstree& tree = *view->tree();
  tree.scan(a->from.value_or(""), limit == SIZE_MAX ? SIZE_MAX : limit + 1,
            [&](std::string_view key, std::string_view value) {
              if (shown == limit) {
                next = std::string(key);
                return false;
              }
              ++shown;
              if (!tree.value_intact(key, value)) {
                ++bad;
                std::fflush(stdout);
                std::fprintf(stderr,
                             "pmrt dump: %s: the value of key \"%s\" fails its checksum "
                             "(not shown)\n",
                             a->pool.c_str(), EscapeBytes(key).c_str());
              } else if (a->json) {
                std::printf("{\"key\":%s,\"value\":%s}\n", JsonString(key).c_str(),
                            JsonString(value).c_str());
              } else if (a->hex) {
                std::printf("%s\t%s\n", HexBytes(key).c_str(), HexBytes(value).c_str());
              } else {
                std::printf("%s\t%s\n", EscapeBytes(key).c_str(), EscapeBytes(value).c_str());
              }
              return true;
            });
  if (next.has_value()) {
    std::fflush(stdout);
    std::fprintf(stderr, "pmrt dump: %zu key%s shown, more follow: --from '%s' continues\n", shown,
                 shown == 1 ? "" : "s", EscapeBytes(*next).c_str());
  }
  return Finish("dump", *view, bad == 0 ? kExitOk : kExitFailed);
}

int RepairCommand(const std::vector<std::string>& args) {
  const auto a = Parse("repair", args, "");
  if (!a.has_value()) return kExitUsage;
  if (a->pool.empty()) {
    std::fprintf(stderr, "pmrt repair: missing POOL\nusage:\n%s", kInspectUsage);
    return kExitUsage;
  }
  // The ordinary open and recovery, allowed the failed-epoch set's reserved last slot, with no
  // background advancer (the heap's lines are settled by this thread alone); tried first in
  // memory with the tree's check, so a pool that cannot be repaired is left as it was.
  KvStoreOptions o;
  o.require_tree = true;
  o.trial_open = true;
  o.check_tree = true;
  o.epochs.interval = std::chrono::milliseconds(0);
  o.epochs.repair = true;
  auto kv = KvStore::Open(a->pool, o);
  auto fail = [&](const absl::Status& st) {
    std::string msg(st.message());
    if (msg.rfind(a->pool, 0) != 0) msg = absl::StrCat(a->pool, ": ", msg);
    std::fprintf(stderr, "pmrt repair: %s\n", msg.c_str());
  };
  if (!kv.ok()) {
    fail(kv.status());
    return ExitStatusForOpenError(kv.status());
  }
  const size_t ranges = (*kv)->epochs().failed_ranges().size();
  // 1. Every node recovered: the check reaches each one, and reaching it repairs it (its
  //    in-line logs resolved against the failed epochs, its epoch re-armed in this execution).
  ds::TreeShape shape;
  if (absl::Status st = (*kv)->tree().CheckInvariants(&shape, nullptr, /*values=*/false);
      !st.ok()) {
    fail(absl::Status(st.code(),
                      absl::StrCat("the tree fails its check, nothing changed: ", st.message())));
    return kExitFailed;
  }
  // 2. The heap's metadata lines still tagged with a failed epoch, recovered the same way.
  const uint64_t lines = (*kv)->heap().SettleFailedLines();
  // 3. All of it durable, then 4. the set emptied.
  if (absl::Status st = (*kv)->epochs().Sync(); !st.ok()) {
    fail(st);
    return kExitFailed;
  }
  if (absl::Status st = (*kv)->epochs().ClearFailedEpochs(); !st.ok()) {
    fail(st);
    return kExitFailed;
  }
  if (absl::Status st = (*kv)->Close(); !st.ok()) {
    fail(st);
    return kExitFailed;
  }
  std::printf(
      "pmrt repair: %s: %zu failed-epoch range%s cleared (%zu border and %zu interior nodes "
      "recovered, %lu heap metadata line%s)\n",
      a->pool.c_str(), ranges, ranges == 1 ? "" : "s", shape.leaves, shape.interiors,
      static_cast<unsigned long>(lines), lines == 1 ? "" : "s");
  return kExitOk;
}

int GrowCommand(const std::vector<std::string>& args) {
  // POOL, then SIZE (absolute) or +BYTES (relative), then the flags Parse knows.
  std::vector<std::string> rest = args;
  std::string size_arg;
  if (rest.size() >= 2 && rest[1].rfind("--", 0) != 0) {
    size_arg = rest[1];
    rest.erase(rest.begin() + 1);
  }
  const auto a = Parse("grow", rest, "--layout");
  if (!a.has_value()) return kExitUsage;
  const bool relative = !size_arg.empty() && size_arg[0] == '+';
  const std::optional<uint64_t> bytes =
      ParseByteCount(relative ? std::string_view(size_arg).substr(1) : std::string_view(size_arg));
  if (a->pool.empty() || !bytes.has_value()) {
    std::fprintf(
        stderr, "pmrt grow: %s\nusage:\n%s",
        size_arg.empty() ? "missing SIZE" : absl::StrCat("bad SIZE '", size_arg, "'").c_str(),
        kInspectUsage);
    return kExitUsage;
  }
  int status = kExitOk;
  auto view = OpenOrReport("grow", *a, &status, /*writable=*/true);
  if (view == nullptr) return status;
  Pool& pool = view->pool();
  const uint64_t old_size = pool.size();
  const uint64_t target = relative ? old_size + *bytes : *bytes;
  if (absl::Status st = view->heap() == nullptr
                            ? absl::FailedPreconditionError("the pool has no heap to grow")
                            : pool.Grow(target);
      !st.ok()) {
    std::string msg(st.message());
    if (msg.rfind(a->pool, 0) != 0) msg = absl::StrCat(a->pool, ": ", msg);
    std::fprintf(stderr, "pmrt grow: %s\n", msg.c_str());
    (void)view->Close();
    return kExitFailed;
  }
  std::printf("pmrt grow: %s: %s -> %s\n", a->pool.c_str(), Bytes(old_size).c_str(),
              Bytes(pool.size()).c_str());
  return Finish("grow", *view, kExitOk);
}

}  // namespace pmrt::tools
