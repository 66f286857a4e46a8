package cli

import "time"

// WithWorkerPacing returns env with the worker's retry and health pacing
// shortened, for a test.
func WithWorkerPacing(env Env, first, max, tick time.Duration) Env {
	env.pacing = &pacing{retryFirst: first, retryMax: max, healthTick: tick}
	return env
}

// DemoPoolConfig is the configuration of the demo's own pool.
var DemoPoolConfig = demoPoolConfig
