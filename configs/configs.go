// Package configs carries inside the binaries that need them the configuration files the
// project ships in this directory, so that those tools work from any directory: the
// cluster's (cluster.yaml, which `ceiling sweep`, `nic`, `fleet` and `challenge` give the
// supervisor unless told -config) and the fleet's balancer templates (haproxy/haproxy.cfg,
// nftables/balancer.nft). The files stay where operators read, copy and edit them; a tool
// given a path reads that file instead (Read), and one that must hand the supervisor a
// path writes the built-in cluster configuration into its scratch directory (WriteCluster).
//
// Non-goals: parsing or checking them (internal/cluster and internal/balancer do), and the
// production binaries: the supervisor finds its configuration by its own rules.
package configs

import (
	_ "embed"
	"os"
	"path/filepath"
)

// Cluster is cluster.yaml, the supervisor's configuration as the project ships it.
//
//go:embed cluster.yaml
var Cluster string

// HAProxy is haproxy/haproxy.cfg, the template of the fleet's HAProxy balancer.
//
//go:embed haproxy/haproxy.cfg
var HAProxy string

// NftBalancer is nftables/balancer.nft, the template of the fleet's nftables balancer.
//
//go:embed nftables/balancer.nft
var NftBalancer string

// Read is the file at path, or builtIn (one of this package's files) when path is "".
// Its error is os.ReadFile's, which names the path: the caller says which flag gave it.
func Read(path, builtIn string) ([]byte, error) {
	if path == "" {
		return []byte(builtIn), nil
	}
	return os.ReadFile(path)
}

// WriteCluster writes Cluster to dir/cluster.yaml, making dir if it is missing, and
// returns that path: a tool that runs the supervisor without -config gives it this one,
// so that it runs from any directory. Its error is the file system's, which names the
// path: the caller says what it was doing.
func WriteCluster(dir string) (string, error) {
	path := filepath.Join(dir, "cluster.yaml")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return path, err
	}
	return path, os.WriteFile(path, []byte(Cluster), 0o644)
}
