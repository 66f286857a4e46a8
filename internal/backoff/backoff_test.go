package backoff

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/trellis-pg/trellis/internal/testsupport"
)

func TestMain(m *testing.M) { os.Exit(testsupport.Main(m)) }

func TestExponential(t *testing.T) {
	b := Exponential{Min: 100 * time.Millisecond, Max: 350 * time.Millisecond}
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
	}
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond}, got)
	b.Reset()
	assert.Equal(t, 100*time.Millisecond, b.Next())
}

func TestJitter(t *testing.T) {
	for range 100 {
		d := Jitter(time.Second)
		assert.GreaterOrEqual(t, d, time.Second)
		assert.LessOrEqual(t, d, 1250*time.Millisecond)
	}
	assert.Equal(t, time.Duration(0), Jitter(0))
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case live := <-done:
		assert.False(t, live)
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not end with its context")
	}
	assert.True(t, Sleep(context.Background(), time.Millisecond))
}

func TestWaitEndsOnAWakeUp(t *testing.T) {
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	begin := time.Now()
	assert.True(t, Wait(context.Background(), time.Hour, wake))
	assert.Less(t, time.Since(begin), time.Minute)
}
