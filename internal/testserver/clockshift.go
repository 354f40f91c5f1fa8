package testserver

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// clockShiftSource is a shared library that, preloaded into a server
// (LD_PRELOAD), shifts its wall clock (CLOCK_REALTIME and its coarse form,
// gettimeofday and time) by an offset in microseconds that it reads, on every
// call, from the 8 bytes of the file DLOCK_CLOCK_SHIFT_FILE names (mapped
// shared, so a write to the file moves the clock at once). The monotonic
// clocks are left alone, as a real step of the wall clock leaves them. It calls
// the kernel directly, so that it runs before any allocator is ready (a
// preloaded libfaketime deadlocks redis-server's jemalloc at start).
const clockShiftSource = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *shift;
static int tried;

static int64_t offset_us(void) {
	if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
		const char *p = getenv("DLOCK_CLOCK_SHIFT_FILE");
		if (p) {
			int fd = (int)syscall(SYS_open, p, O_RDONLY);
			if (fd >= 0) {
				void *m = (void *)syscall(SYS_mmap, NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
				if (m != MAP_FAILED) {
					__atomic_store_n(&shift, (int64_t *)m, __ATOMIC_RELEASE);
				}
				syscall(SYS_close, fd);
			}
		}
		__atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
	}
	volatile int64_t *s = __atomic_load_n(&shift, __ATOMIC_ACQUIRE);
	return s ? *s : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = (int)syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset_us() * 1000;
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0 && tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
`

// ClockShift steps the wall clock of the servers started with its Env: a real
// server process whose clock reads the host's plus an offset that Set changes
// at any moment. It needs a C compiler (cc) to build its library.
type ClockShift struct {
	lib, file string
}

// NewClockShift builds the library into a temporary directory of t, with the
// offset 0.
func NewClockShift(t testing.TB) *ClockShift {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Fatalf("testserver: no C compiler (cc) to build the clock-shift library: install gcc (./test.sh does as root): %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "clockshift.c")
	if err := os.WriteFile(src, []byte(clockShiftSource), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &ClockShift{lib: filepath.Join(dir, "clockshift.so"), file: filepath.Join(dir, "offset")}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", c.lib, src).CombinedOutput(); err != nil {
		t.Fatalf("testserver: building the clock-shift library: %v\n%s", err, out)
	}
	if err := os.WriteFile(c.file, make([]byte, 8), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// Env is the environment that makes a server process take its clock from c
// (see StartRedisEnv).
func (c *ClockShift) Env() []string {
	return []string{"LD_PRELOAD=" + c.lib, "DLOCK_CLOCK_SHIFT_FILE=" + c.file}
}

// Set makes the servers' wall clock read the host's plus d, from now on (to
// the microsecond).
func (c *ClockShift) Set(t testing.TB, d time.Duration) {
	t.Helper()
	f, err := os.OpenFile(c.file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(d.Microseconds()))
	if _, err := f.WriteAt(b[:], 0); err != nil {
		t.Fatal(err)
	}
}
