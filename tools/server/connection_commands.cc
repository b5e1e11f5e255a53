// The connection commands of the Executor (commands.h): HELLO, AUTH, CLIENT and TIME, with
// Redis 7's replies and error strings. They read and change the caller's Session only; CLIENT
// LIST also reads the other registered sessions, under the registry's mutex.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/server/commands.h"
#include "tools/server/resp.h"

namespace pmrt::server {
namespace {

using After = Executor::After;

constexpr char kWrongPass[] = "WRONGPASS invalid username-password pair or user is disabled.";

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Compares in time that depends on the lengths only, not on where the bytes first differ.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// Redis's rule for client names and library names: printable ASCII without blanks.
bool PrintableName(std::string_view s) {
  for (char c : s) {
    if (c < '!' || c > '~') return false;
  }
  return true;
}

void ArityError(std::string& out, const std::string& command) {
  AppendError(out, absl::StrCat("ERR wrong number of arguments for '", command, "' command"));
}

}  // namespace

bool Executor::Authenticate(std::string_view user, std::string_view pass, Call& call,
                            std::string& out) {
  // One user, "default". Without requirepass it takes any password (Redis's "nopass").
  const bool required = settings_.auth_required.load(std::memory_order_relaxed);
  const bool ok = user == "default" && (!required || SameSecret(pass, settings_.requirepass()));
  if (!ok) {
    AppendError(out, kWrongPass);
    return false;
  }
  call.session.authenticated = true;
  return true;
}

After Executor::Auth(Args& a, std::string& out, Call& call) {
  if (a.size() > 3) {
    AppendError(out, "ERR syntax error");
    return After::kNone;
  }
  if (a.size() == 2 && !settings_.auth_required.load(std::memory_order_relaxed)) {
    AppendError(out,
                "ERR AUTH <password> called without any password configured for the default "
                "user. Are you sure your configuration is correct?");
    return After::kNone;
  }
  const std::string_view user = a.size() == 3 ? std::string_view(a[1]) : "default";
  if (Authenticate(user, a.back(), call, out)) AppendSimple(out, "OK");
  return After::kNone;
}

After Executor::Hello(Args& a, std::string& out, Call& call) {
  int64_t version = 0;
  size_t next = 1;
  if (a.size() >= 2) {
    if (!absl::SimpleAtoi(a[1], &version)) {
      AppendError(out, "ERR Protocol version is not an integer or out of range");
      return After::kNone;
    }
    if (version < 2 || version > 3) {
      AppendError(out, "NOPROTO unsupported protocol version");
      return After::kNone;
    }
    next = 2;
  }
  const std::string* user = nullptr;
  const std::string* pass = nullptr;
  const std::string* name = nullptr;
  for (size_t i = next; i < a.size(); ++i) {
    const size_t more = a.size() - 1 - i;
    const std::string opt = absl::AsciiStrToLower(a[i]);
    if (opt == "auth" && more >= 2) {
      user = &a[i + 1];
      pass = &a[i + 2];
      i += 2;
    } else if (opt == "setname" && more >= 1) {
      name = &a[i + 1];
      i += 1;
    } else {
      AppendError(out,
                  absl::StrCat("ERR Syntax error in HELLO option '", a[i].substr(0, 128), "'"));
      return After::kNone;
    }
  }
  if (user != nullptr && !Authenticate(*user, *pass, call, out)) return After::kNone;
  if (!call.session.authenticated && settings_.auth_required.load(std::memory_order_relaxed)) {
    AppendError(out,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise "
                "the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
                "client and select the RESP protocol version at the same time");
    return After::kNone;
  }
  if (name != nullptr && !PrintableName(*name)) {
    AppendError(out, "ERR Client names cannot contain spaces, newlines or special characters.");
    return After::kNone;
  }
  {
    std::lock_guard<std::mutex> l(clients_mu_);
    if (name != nullptr) call.session.name = *name;
    if (version != 0) call.session.resp = static_cast<int>(version);
  }
  // The reply is in the protocol just chosen: a map of 7 in RESP3, an array of 14 in RESP2.
  const int proto = call.proto();
  AppendMapHeader(out, 7, proto);
  AppendBulk(out, "server");
  AppendBulk(out, "redis");
  AppendBulk(out, "version");
  AppendBulk(out, kRedisVersion);
  AppendBulk(out, "proto");
  AppendInteger(out, proto);
  AppendBulk(out, "id");
  AppendInteger(out, static_cast<int64_t>(call.session.id));
  AppendBulk(out, "mode");
  AppendBulk(out, "standalone");
  AppendBulk(out, "role");
  AppendBulk(out, "master");
  AppendBulk(out, "modules");
  AppendArrayHeader(out, 0);
  return After::kNone;
}

std::string Executor::ClientLine(const Session& s, int64_t now_ns) const {
  const int64_t age = (now_ns - s.created_ns) / 1000000000;
  const int64_t idle = (now_ns - s.last_active_ns.load(std::memory_order_relaxed)) / 1000000000;
  return absl::StrCat("id=", s.id, " addr=", s.addr, " laddr=", s.laddr, " fd=", s.fd,
                      " name=", s.name, " age=", age, " idle=", std::max<int64_t>(idle, 0),
                      " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0"
                      " multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=",
                      s.last_command.load(std::memory_order_relaxed),
                      " user=default redir=-1 resp=", s.resp, " lib-name=", s.lib_name,
                      " lib-ver=", s.lib_ver);
}

After Executor::Client(Args& a, std::string& out, Call& call) {
  const std::string sub = absl::AsciiStrToLower(a[1]);
  Session& self = call.session;
  // The fixed arities of the subcommands with one.
  const int arity = sub == "id" || sub == "getname" || sub == "info" ? 2
                    : sub == "setname"                               ? 3
                    : sub == "setinfo"                               ? 4
                                                                     : 0;
  if (arity != 0 && static_cast<int>(a.size()) != arity) {
    ArityError(out, absl::StrCat("client|", sub));
    return After::kNone;
  }
  if (sub == "id") {
    AppendInteger(out, static_cast<int64_t>(self.id));
  } else if (sub == "getname") {
    if (self.name.empty()) {
      AppendNull(out, call.proto());
    } else {
      AppendBulk(out, self.name);
    }
  } else if (sub == "setname") {
    if (!PrintableName(a[2])) {
      AppendError(out, "ERR Client names cannot contain spaces, newlines or special characters.");
      return After::kNone;
    }
    std::lock_guard<std::mutex> l(clients_mu_);
    self.name = a[2];
    AppendSimple(out, "OK");
  } else if (sub == "setinfo") {
    const std::string attr = absl::AsciiStrToLower(a[2]);
    if (attr != "lib-name" && attr != "lib-ver") {
      AppendError(out, absl::StrCat("ERR Unrecognized option '", a[2].substr(0, 128), "'"));
      return After::kNone;
    }
    if (!PrintableName(a[3])) {
      AppendError(out, absl::StrCat("ERR ", attr,
                                    " cannot contain spaces, newlines or special characters."));
      return After::kNone;
    }
    std::lock_guard<std::mutex> l(clients_mu_);
    (attr == "lib-name" ? self.lib_name : self.lib_ver) = a[3];
    AppendSimple(out, "OK");
  } else if (sub == "info") {
    std::string line;
    {
      std::lock_guard<std::mutex> l(clients_mu_);
      line = ClientLine(self, SteadyNowNs());
    }
    AppendVerbatim(out, line + "\n", call.proto());
  } else if (sub == "list") {
    return ClientList(a, out, call);
  } else {
    AppendError(
        out, absl::StrCat("ERR unknown subcommand '", a[1].substr(0, 128), "'. Try CLIENT HELP."));
  }
  return After::kNone;
}

After Executor::ClientList(Args& a, std::string& out, Call& call) {
  // CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id [id ...]]: every client is "normal".
  bool none = false;
  std::vector<uint64_t> ids;
  for (size_t i = 2; i < a.size(); ++i) {
    const std::string opt = absl::AsciiStrToLower(a[i]);
    if (opt == "type" && i + 1 < a.size()) {
      const std::string type = absl::AsciiStrToLower(a[++i]);
      if (type == "master" || type == "replica" || type == "slave" || type == "pubsub") {
        none = true;
      } else if (type != "normal") {
        AppendError(out, absl::StrCat("ERR Unknown client type '", a[i].substr(0, 128), "'"));
        return After::kNone;
      }
    } else if (opt == "id" && i + 1 < a.size()) {
      for (++i; i < a.size(); ++i) {
        uint64_t id;
        if (!absl::SimpleAtoi(a[i], &id) || id == 0) {
          AppendError(out, "ERR Invalid client ID");
          return After::kNone;
        }
        ids.push_back(id);
      }
    } else {
      AppendError(out, "ERR syntax error");
      return After::kNone;
    }
  }
  std::string text;
  const int64_t now = SteadyNowNs();
  if (!none) {
    std::lock_guard<std::mutex> l(clients_mu_);
    if (ids.empty()) {
      for (const auto& [id, s] : clients_) absl::StrAppend(&text, ClientLine(*s, now), "\n");
    } else {
      // One lookup per distinct id, in id order (the order of the full list).
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (uint64_t id : ids) {
        if (auto it = clients_.find(id); it != clients_.end())
          absl::StrAppend(&text, ClientLine(*it->second, now), "\n");
      }
    }
  }
  AppendVerbatim(out, text, call.proto());
  return After::kNone;
}

After Executor::Time(Args&, std::string& out, Call&) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  AppendArrayHeader(out, 2);
  AppendBulk(out, std::to_string(us / 1000000));
  AppendBulk(out, std::to_string(us % 1000000));
  return After::kNone;
}

}  // namespace pmrt::server
