// A Go program of the usual shape (issue 16): N goroutines deposit into one
// account whose sync.Mutex is hot in (*Account).Deposit; main waits.
// lockscope cannot see a goroutine waiting for a sync.Mutex (it parks in the
// Go scheduler; uprobes on the runtime would be needed): tests/test_langs.py
// checks that the runtime's thread parking is not taken for a lock.
//
//	go build -o counter counter.go
//	./counter N                 runs until killed
package main

import (
	"os"
	"strconv"
	"sync"
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

func main() {
	n, _ := strconv.Atoi(os.Args[1])
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
