#include "common/pem_file.h"

#include <fstream>
#include <sstream>

namespace tierkv {

Result<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status(ErrorCode::INVALID_CONFIG,
                  std::string(what) + ": cannot read " + path + " (a PEM file is expected)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return Status(ErrorCode::INVALID_CONFIG,
                  std::string(what) + ": " + path + " holds no PEM block (-----BEGIN ...)");
  }
  return pem;
}

}  // namespace tierkv
