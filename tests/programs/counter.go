// A Go program of the usual shape (issue 16): N goroutines deposit into one
// account whose sync.Mutex is hot in (*Account).Deposit; main waits.
// lockscope sees the goroutines wait for it through uprobes on the Go
// runtime (probes/gomutex.bpf.c); tests/test_langs.py checks it names the
// mutex from main.(*Account).Deposit, and that Go's own mutex profile of the
// same run ranks the same function first: with COUNTER_MUTEX_PROFILE=path
// the program records every contention (runtime.SetMutexProfileFraction(1))
// and writes the profile there when it is told to stop (SIGTERM, SIGINT).
//
//	go build -o counter counter.go
//	./counter N                 runs until killed
package main

import (
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
)

type Account struct {
	mu      sync.Mutex
	balance int64
}

func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ s
	}
	return s
}

//go:noinline
func (a *Account) Deposit(v int64) {
	a.mu.Lock()
	a.balance += v + int64(spin(400)&1)
	a.mu.Unlock()
}

// writeProfileAtStop writes the mutex profile to path at SIGTERM or SIGINT, then exits
func writeProfileAtStop(path string) {
	runtime.SetMutexProfileFraction(1)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		f, err := os.Create(path + ".tmp")
		if err == nil && pprof.Lookup("mutex").WriteTo(f, 0) == nil && f.Close() == nil {
			os.Rename(path+".tmp", path)
		}
		os.Exit(0)
	}()
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	if path := os.Getenv("COUNTER_MUTEX_PROFILE"); path != "" {
		writeProfileAtStop(path)
	}
	acc := &Account{}
	var wg sync.WaitGroup
	for t := 0; t < n; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			for {
				acc.Deposit(int64(t))
				spin(400)
			}
		}(t)
	}
	wg.Wait()
}
