// Producers on one Go channel (bench/go_probe_effect.py): N goroutines
// (argv[1]) send on one buffered channel for SECONDS (argv[2]) while one
// goroutine drains it. Its own counters: sends per second and Go's own
// runtime-lock and sync.Mutex wait over the window (runtime/metrics
// /sync/mutex/wait/total:seconds), printed as "ops/s: N" and "mutex wait: S s"
// to stderr, and to the file $GOCHAN_OUT when set. A probe that changes the
// runtime's locking (a uprobe fired while a channel's lock is held) shows as
// more mutex wait and fewer sends than without lockscope. With
// $GOCHAN_CPUPROFILE set, Go's own CPU profile of the window is written there
// (the independent figure for the time spent spinning in runtime.lock2).
package main

import (
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	secs, _ := strconv.ParseFloat(os.Args[2], 64)
	ch := make(chan int, 16)
	var stop sync.WaitGroup
	done := make(chan struct{})
	var sent [64]int64
	for i := 0; i < n; i++ {
		stop.Add(1)
		go func(i int) {
			defer stop.Done()
			for {
				select {
				case <-done:
					return
				case ch <- i:
					sent[i]++
				}
			}
		}(i)
	}
	go func() {
		for range ch {
		}
	}()
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	w0 := s[0].Value.Float64()
	var prof *os.File
	if p := os.Getenv("GOCHAN_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			prof = f
		}
	}
	time.Sleep(time.Duration(secs * float64(time.Second)))
	if prof != nil {
		pprof.StopCPUProfile()
		prof.Close()
	}
	metrics.Read(s)
	w1 := s[0].Value.Float64()
	close(done)
	stop.Wait()
	var total int64
	for i := 0; i < n; i++ {
		total += sent[i]
	}
	out := fmt.Sprintf("ops/s: %.0f\nmutex wait: %.3f s\n", float64(total)/secs, w1-w0)
	fmt.Fprint(os.Stderr, out)
	if f := os.Getenv("GOCHAN_OUT"); f != "" {
		os.WriteFile(f, []byte(out), 0644)
	}
}
