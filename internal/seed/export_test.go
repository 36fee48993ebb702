package seed

// RaceEnabled lets the external tests skip what the race detector makes too slow.
const RaceEnabled = raceEnabled
