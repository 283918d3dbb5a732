// A Go sync.Mutex program with its own clock, for `lockscope confirm` (the
// Go twin of confirm.c).
//
//	confirm THREADS HOLD_US WORK_US SECONDS [CLOCK_FILE]
//
// THREADS goroutines (GOMAXPROCS as many) loop: lock one global sync.Mutex,
// spin HOLD_US, unlock; spin WORK_US outside it. Every 0.1 s it prints
// "ops: N" and, with CLOCK_FILE, appends "T_NS OPS HOLD_NS" there
// (CLOCK_MONOTONIC, operations, the time the lock was held in total, from
// Lock's return to Unlock's return: a wait added before the release counts).
//
// sync.Mutex's Lock and Unlock are inlined into their callers by default, so
// that no uprobe on them fires: build with -gcflags=all=-l for confirm.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var mu sync.Mutex
var ops, heldNs atomic.Int64

func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

func worker(hold, work time.Duration) {
	for {
		mu.Lock()
		t0 := time.Now()
		spin(hold)
		mu.Unlock()
		heldNs.Add(int64(time.Since(t0)))
		ops.Add(1)
		spin(work)
	}
}

func monotonicNs() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0) // CLOCK_MONOTONIC
	return ts.Sec*1e9 + ts.Nsec
}

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: confirm THREADS HOLD_US WORK_US SECONDS")
		os.Exit(2)
	}
	n, _ := strconv.Atoi(os.Args[1])
	hold, _ := strconv.Atoi(os.Args[2])
	work, _ := strconv.Atoi(os.Args[3])
	secs, _ := strconv.Atoi(os.Args[4])
	var clock *os.File
	if len(os.Args) > 5 {
		var err error
		if clock, err = os.Create(os.Args[5]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	runtime.GOMAXPROCS(n)
	for i := 0; i < n; i++ {
		go worker(time.Duration(hold)*time.Microsecond, time.Duration(work)*time.Microsecond)
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
		fmt.Printf("ops: %d\n", ops.Load())
		if clock != nil {
			fmt.Fprintf(clock, "%d %d %d\n", monotonicNs(), ops.Load(), heldNs.Load())
		}
	}
	fmt.Printf("ops/s: %.1f\n", float64(ops.Load())/float64(secs))
}
