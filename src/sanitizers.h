/* sanitizers.h - which sanitizer this translation unit is built with, the
 * same under GCC (__SANITIZE_*__) and clang (__has_feature): SPINDLE_ASAN,
 * SPINDLE_TSAN, and SPINDLE_SANITIZED for either. */
#ifndef SPINDLE_SANITIZERS_H
#define SPINDLE_SANITIZERS_H

#ifndef __has_feature
#define __has_feature(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define SPINDLE_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define SPINDLE_TSAN 1
#endif
#if defined(SPINDLE_ASAN) || defined(SPINDLE_TSAN)
#define SPINDLE_SANITIZED 1
#endif

#endif
