#include "tests/tools/tool_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tests/util/test_util.h"
#include "tools/kv_store.h"

namespace pmrt::testing {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// A recursive-descent reader of one JSON value (RFC 8259), flattening as it goes.
class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}

  bool Document(std::map<std::string, std::string>* out) {
    out_ = out;
    if (!Value("")) return false;
    Space();
    return i_ == s_.size();
  }

 private:
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  bool Eat(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  bool Value(const std::string& path) {
    Space();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '{') return Object(path);
    if (c == '[') return Array(path);
    if (c == '"') {
      std::string v;
      if (!String(&v)) return false;
      (*out_)[path] = v;
      return true;
    }
    const size_t start = i_;
    while (i_ < s_.size() &&
           std::string("+-.0123456789eEtruefalsn").find(s_[i_]) != std::string::npos)
      ++i_;
    const std::string lit = s_.substr(start, i_ - start);
    if (lit.empty()) return false;
    if (lit != "true" && lit != "false" && lit != "null") {
      char* end = nullptr;
      std::strtod(lit.c_str(), &end);
      if (end != lit.c_str() + lit.size()) return false;
    }
    (*out_)[path] = lit;
    return true;
  }
  bool Object(const std::string& path) {
    ++i_;
    (*out_)[path] = "{}";
    if (Eat('}')) return true;
    do {
      Space();
      std::string key;
      if (!String(&key) || !Eat(':') || !Value(Join(path, key))) return false;
    } while (Eat(','));
    return Eat('}');
  }
  bool Array(const std::string& path) {
    ++i_;
    (*out_)[path] = "[]";
    if (Eat(']')) return true;
    int n = 0;
    do {
      if (!Value(Join(path, std::to_string(n++)))) return false;
    } while (Eat(','));
    return Eat(']');
  }
  bool String(std::string* v) {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (c == '"') {
        ++i_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        v->push_back(c);
        continue;
      }
      if (++i_ >= s_.size()) return false;
      switch (s_[i_]) {
        case '"':
        case '\\':
        case '/':
          v->push_back(s_[i_]);
          break;
        case 'n':
          v->push_back('\n');
          break;
        case 't':
          v->push_back('\t');
          break;
        case 'r':
          v->push_back('\r');
          break;
        case 'b':
          v->push_back('\b');
          break;
        case 'f':
          v->push_back('\f');
          break;
        case 'u': {
          if (i_ + 4 >= s_.size()) return false;
          const unsigned long cp = std::strtoul(s_.substr(i_ + 1, 4).c_str(), nullptr, 16);
          if (cp > 0xff) return false;  // the tool writes only \u00HH (one byte each)
          v->push_back(static_cast<char>(cp));
          i_ += 4;
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  const std::string& s_;
  size_t i_ = 0;
  std::map<std::string, std::string>* out_ = nullptr;
};

}  // namespace

ToolResult RunTool(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string err_path =
      "/tmp/pmrt-tool-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".err";
  std::string cmd = Quote(PMRT_TOOL_PATH);
  for (const std::string& a : args) cmd += " " + Quote(a);
  cmd += " </dev/null 2>" + Quote(err_path);
  ToolResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = ReadFile(err_path).value_or("");
  unlink(err_path.c_str());
  return r;
}

std::optional<std::map<std::string, std::string>> ParseJson(const std::string& text) {
  std::map<std::string, std::string> out;
  JsonReader reader(text);
  if (!reader.Document(&out)) return std::nullopt;
  return out;
}

void PutKv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& pairs) {
  tools::KvStoreOptions options;
  options.create_size = 16 << 20;
  auto kv = tools::KvStore::Open(path, options);
  ASSERT_OK(kv);
  for (const auto& [k, v] : pairs) {
    ASSERT_NE((*kv)->tree().put(k, v), ds::PutResult::kNoMemory) << k;
  }
  ASSERT_OK((*kv)->epochs().Sync());
  ASSERT_OK((*kv)->Close());
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

}  // namespace pmrt::testing
