// RESP2, the Redis serialization protocol: an incremental request parser and reply encoders
// (and the RESP3 forms of the replies that differ, for connections that asked with HELLO 3).
//
//   pmrt::server::RespParser parser({.max_bulk = 1 << 20});
//   parser.Feed(bytes, n);                        // whatever the socket returned
//   std::vector<std::string> argv;
//   while (parser.Next(&argv) == RespParser::kCommand) { ... }   // complete commands, in order
//   if (parser.failed()) reply RespError(parser.error()) and close the connection
//
//   std::string out;
//   AppendBulk(out, "value");                     // "$5\r\nvalue\r\n"
//
// Requests are either multibulk arrays of bulk strings ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), the
// form every client library sends, or inline commands ("GET k\r\n", what a person types into
// telnet), split on blanks with double and single quotes as Redis does. The parser accepts any
// split of the stream into Feed calls; it keeps the state of a partly received command, so a
// large bulk string is scanned once, not once per Feed.
//
// Limits (each violation is a protocol error, after which the parser stays failed: the stream
// has lost its framing, so the connection must be closed, as Redis does):
//   * a bulk string longer than max_bulk bytes, a negative bulk length;
//   * an array of more than max_args elements;
//   * an inline command, or the header line of an array or bulk string, longer than
//     max_inline bytes without its line end;
//   * anything but '$' where a bulk string header is due, a malformed number, a missing CRLF.
// An array of length <= 0 ("*0", "*-1") and an empty inline line are skipped, as Redis does.
//
// Memory: the buffered input is at most the unparsed part of the stream; the parser never
// reserves memory on the strength of a declared length (a client that declares a 512 MiB bulk
// and sends nothing costs nothing).
//
// Thread safety: none; one parser per connection.
#ifndef PMRT_TOOLS_SERVER_RESP_H_
#define PMRT_TOOLS_SERVER_RESP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmrt::server {

struct RespLimits {
  uint64_t max_bulk = 512ull << 20;  // bytes in one bulk string (Redis: proto-max-bulk-len)
  uint64_t max_args = 1 << 20;       // elements of one array
  size_t max_inline = 64 << 10;      // bytes of an inline command or a header line
};

class RespParser {
 public:
  enum Result {
    kCommand,     // *argv holds the next command (at least one argument)
    kIncomplete,  // more input is needed (everything fed so far has been consumed or kept)
    kError,       // protocol error: error() says what; the parser stays failed
  };

  explicit RespParser(RespLimits limits = {}) : limits_(limits) {}

  // Appends input bytes. Ignored once failed.
  void Feed(const char* data, size_t n);
  void Feed(std::string_view data) { Feed(data.data(), data.size()); }
  // Parses the next complete command into *argv (replacing its contents).
  Result Next(std::vector<std::string>* argv);

  // A connection that has not authenticated yet (a password is set) gets Redis's limits for
  // one: at most kUnauthenticatedArgs elements and kUnauthenticatedBulk bytes per bulk string
  // ("Protocol error: unauthenticated multibulk length" / "... bulk length"), so a client without
  // the password cannot make the server buffer a large request.
  static constexpr uint64_t kUnauthenticatedArgs = 10;
  static constexpr uint64_t kUnauthenticatedBulk = 16384;
  void set_unauthenticated(bool on) { unauthenticated_ = on; }

  bool failed() const { return !error_.empty(); }
  // The protocol error, e.g. "Protocol error: invalid bulk length" (empty unless failed()).
  const std::string& error() const { return error_; }
  // Bytes fed but not yet returned as part of a command (includes a partial command).
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  enum class State {
    kIdle,        // between commands
    kArgHeader,   // inside an array: expecting "$<len>\r\n" for argument args_.size()
    kArgPayload,  // expecting bulk_len_ bytes and CRLF
  };

  Result Fail(std::string_view what);
  Result ParseInline(std::vector<std::string>* argv);
  // Finds the CRLF-terminated line starting at pos_; false when incomplete (or failed: check
  // failed()). *line excludes the CRLF; *next is the offset after it.
  bool Line(std::string_view* line, size_t* next);
  void Compact();

  RespLimits limits_;
  bool unauthenticated_ = false;
  std::string buf_;
  size_t pos_ = 0;  // first unconsumed byte of buf_
  State state_ = State::kIdle;
  uint64_t args_expected_ = 0;     // elements of the array being parsed
  uint64_t bulk_len_ = 0;          // length of the bulk string being parsed (kArgPayload)
  std::vector<std::string> args_;  // arguments parsed so far of the current array
  std::string error_;
};

// Splits an inline command line the way Redis's sdssplitargs does: blanks separate arguments;
// "..." takes the escapes \n \r \t \b \a \\ \" and \xHH; '...' takes \'; a closing quote must be
// followed by a blank or the end. False for unbalanced quotes.
bool SplitInline(std::string_view line, std::vector<std::string>* argv);

// ---- reply encoders: each appends one RESP2 value to *out ----
void AppendSimple(std::string& out, std::string_view s);  // "+s\r\n" (s without CR/LF)
// "-msg\r\n"; CR and LF in msg become blanks (an error is one line).
void AppendError(std::string& out, std::string_view msg);
void AppendInteger(std::string& out, int64_t v);  // ":v\r\n"
void AppendBulk(std::string& out, std::string_view s);
void AppendNullBulk(std::string& out);  // "$-1\r\n"
void AppendArrayHeader(std::string& out, size_t n);

// ---- the replies whose RESP3 form differs (HELLO 3); `proto` is the connection's, 2 or 3 ----
void AppendNull(std::string& out, int proto);  // RESP3 "_\r\n"; RESP2 "$-1\r\n"
// A map of `pairs` key-value pairs follows: RESP3 "%pairs"; RESP2 an array of 2 * pairs.
void AppendMapHeader(std::string& out, size_t pairs, int proto);
// Text for people (INFO, CLIENT LIST): RESP3 a verbatim string "=len\r\ntxt:text\r\n"; RESP2
// a bulk string.
void AppendVerbatim(std::string& out, std::string_view text, int proto);

}  // namespace pmrt::server

#endif  // PMRT_TOOLS_SERVER_RESP_H_
