// JsonWriter: builds one compact JSON text (no dependencies; strings via tools/bytes_format.h).
//
//   JsonWriter j;
//   j.BeginObject().Key("keys").Uint(3).Key("layers").BeginArray().Str("a").EndArray()
//    .EndObject();
//   j.str() == R"({"keys":3,"layers":["a"]})"
//
// The caller keeps the nesting right (every Key is followed by one value, Begin* by End*);
// the writer puts the commas and colons. Doubles are printed with %.6g; non-finite ones as null.
#ifndef PMRT_TOOLS_JSON_WRITER_H_
#define PMRT_TOOLS_JSON_WRITER_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/bytes_format.h"

namespace pmrt::tools {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  JsonWriter& Key(std::string_view k) {
    Separate();
    out_ += JsonString(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& Str(std::string_view s) { return Raw(JsonString(s)); }
  JsonWriter& Uint(uint64_t v) { return Raw(absl::StrCat(v)); }
  JsonWriter& Int(int64_t v) { return Raw(absl::StrCat(v)); }
  JsonWriter& Double(double v) {
    return Raw(std::isfinite(v) ? absl::StrFormat("%.6g", v) : std::string("null"));
  }
  JsonWriter& Bool(bool v) { return Raw(v ? "true" : "false"); }
  JsonWriter& Null() { return Raw("null"); }
  const std::string& str() const { return out_; }

 private:
  // A value or key after another one in the same container needs a comma first.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  JsonWriter& Raw(std::string_view text) {
    Separate();
    out_.append(text.data(), text.size());
    return *this;
  }
  JsonWriter& Open(char c) {
    Separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace pmrt::tools

#endif  // PMRT_TOOLS_JSON_WRITER_H_
