// A Go program of the usual shape (issue 16): N goroutines deposit into one
// account whose sync.Mutex is hot in (*Account).Deposit; main waits.
// lockscope sees the goroutines wait for it through uprobes on the Go
// runtime (probes/gomutex.bpf.c); tests/test_langs.py checks it names the
// mutex from main.(*Account).Deposit, and that Go's own mutex profile of the
// same run ranks the same function first: with COUNTER_MUTEX_PROFILE=path
// the program records every contention (runtime.SetMutexProfileFraction(1))
// and writes the profile there when it is told to stop (SIGTERM, SIGINT).
// With COUNTER_CPU_PROFILE=path, Go's own CPU profile of the run is written
// there at that stop (the independent figure for sync.Mutex's spinning).
//
//	go build -o counter counter.go
//	./counter N [heap|global|rw]    runs until killed
//
// heap (default): the sync.Mutex of an Account on the heap, named by
// main.(*Account).Deposit. global: the package-level `var mu sync.Mutex`,
// named by its symbol main.mu. rw: a sync.RWMutex on the heap, hot with
// mostly writers (main.(*Table).Put) and some readers (main.(*Table).Get),
// so that both wait: one lock.
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

// mu is the global mutex of mode global
var mu sync.Mutex
var total int64

//go:noinline
func depositGlobal(v int64) {
	mu.Lock()
	total += v + int64(spin(400)&1)
	mu.Unlock()
}

type Table struct {
	mu   sync.RWMutex
	rows [8]int64
}

//go:noinline
func (t *Table) Put(i int, v int64) {
	t.mu.Lock()
	t.rows[i&7] += v + int64(spin(2000)&1)
	t.mu.Unlock()
}

//go:noinline
func (t *Table) Get(i int) int64 {
	t.mu.RLock()
	v := t.rows[i&7] + int64(spin(2000)&1)
	t.mu.RUnlock()
	return v
}

// writeProfilesAtStop writes the mutex profile to mutexPath and stops the CPU
// profile started into cpuPath ("": none) at SIGTERM or SIGINT, then exits
func writeProfilesAtStop(mutexPath, cpuPath string) {
	var cpu *os.File
	if mutexPath != "" {
		runtime.SetMutexProfileFraction(1)
	}
	if cpuPath != "" {
		if f, err := os.Create(cpuPath + ".tmp"); err == nil && pprof.StartCPUProfile(f) == nil {
			cpu = f
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		if cpu != nil {
			pprof.StopCPUProfile()
			if cpu.Close() == nil {
				os.Rename(cpuPath+".tmp", cpuPath)
			}
		}
		if mutexPath != "" {
			f, err := os.Create(mutexPath + ".tmp")
			if err == nil && pprof.Lookup("mutex").WriteTo(f, 0) == nil && f.Close() == nil {
				os.Rename(mutexPath+".tmp", mutexPath)
			}
		}
		os.Exit(0)
	}()
}

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	if m, c := os.Getenv("COUNTER_MUTEX_PROFILE"), os.Getenv("COUNTER_CPU_PROFILE"); m != "" || c != "" {
		writeProfilesAtStop(m, c)
	}
	mode := "heap"
	if len(os.Args) > 2 {
		mode = os.Args[2]
	}
	acc := &Account{}
	table := &Table{}
	var wg sync.WaitGroup
	for t := 0; t < n; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			for i := 0; ; i++ {
				switch mode {
				case "global":
					depositGlobal(int64(t))
				case "rw":
					if i%4 == 3 {
						table.Get(i)
					} else {
						table.Put(i, int64(t))
					}
				default:
					acc.Deposit(int64(t))
				}
				spin(400)
			}
		}(t)
	}
	wg.Wait()
}
