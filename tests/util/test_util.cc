#include "tests/util/test_util.h"

#include <cstdlib>
#include <filesystem>

namespace pmrt::testing {

TempDir::TempDir() {
  std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  if (const char* t = std::getenv("PMRT_TEST_DIR")) base = t;
  std::string tmpl = base + "/pmrt-test-XXXXXX";
  char* p = mkdtemp(tmpl.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace pmrt::testing
