// Which sanitizer a test is compiled under, for the few tests whose bounds or checks differ there.
// gcc says __SANITIZE_ADDRESS__ (it has no ThreadSanitizer build here); clang says __has_feature.
// Preprocessor flags, so that a test can also leave out code that only one build may run.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define AGENTD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGENTD_TEST_ASAN 1
#endif
#endif

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AGENTD_TEST_TSAN 1
#endif
#endif
