//go:build race

package cluster

// raceEnabled: allocation budgets are not checked under the race detector, which adds its own.
const raceEnabled = true
