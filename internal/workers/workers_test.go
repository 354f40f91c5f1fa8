package workers

import (
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGoRunsEveryCall runs calls from several goroutines at once, some while
// others block, and checks that each ran once; the workers end when idle (the
// leak check at the end).
func TestGoRunsEveryCall(t *testing.T) {
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[int]int{}
	release := make(chan struct{})
	for i := range n {
		wg.Add(1)
		Go(func() {
			defer wg.Done()
			if i%10 == 0 {
				<-release // a blocked call does not hold up the others
			}
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	close(release)
	wg.Wait()
	for i := range n {
		if ran[i] != 1 {
			t.Fatalf("call %d ran %d times", i, ran[i])
		}
	}
}
