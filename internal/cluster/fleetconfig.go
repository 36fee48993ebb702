package cluster

// FleetConfig is the configuration file's `fleet:` section: this host as one of a fleet of
// hosts that share one database through a write log (docs/fleet.md). Like Agent it is the
// supervisor's, not a cluster's: `supervisor run -fleet ... -fleet-self ... -fleet-dir ...`
// sets the same. The supervisor checks it (internal/fleetspec), runs the host's log node
// as one more app and hands every app the settings in its environment; it interprets
// nothing else of it.
type FleetConfig struct {
	// Hosts is every host, NAME=ADDR[:PORT],..., the same list on every host.
	Hosts string `yaml:"hosts"`
	// Self is this host's name in Hosts.
	Self string `yaml:"self"`
	// Dir is where this host keeps its copy of the log.
	Dir string `yaml:"dir"`
	// Sync is "" (the log's default fsync policy) or "always" (fsync every write).
	Sync string `yaml:"sync"`
}

// IsZero reports whether the section is absent.
func (f FleetConfig) IsZero() bool { return f == FleetConfig{} }
