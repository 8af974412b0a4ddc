#include <string>

#include "service/cli/commands.h"

namespace vv::cli {

std::string version_string() {
  std::string features = "cpu";
#if defined(__x86_64__)
  features += " avx2";  // fast paths compiled in; chosen at run time when the CPU has them
  features += " avx512";
#endif
#ifdef VV_HAVE_CUDA
  features += " cuda";
#endif
#ifdef VV_HAVE_FFMPEG
  features += " ffmpeg";
#endif
#ifdef VV_HAVE_ALSA
  features += " alsa";
#endif
  std::string sha = VV_GIT_SHA;
  return std::string(VV_VERSION) + " (git " + sha.substr(0, 12) + ") [" + features + "]";
}

}  // namespace vv::cli
