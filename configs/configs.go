// Package configs carries inside the binaries that need them the configuration files the
// project ships in this directory, so that those tools work from any directory: the
// cluster's (cluster.yaml, which `ceiling sweep`, `nic`, `fleet` and `challenge` give the
// supervisor unless told -config) and the fleet's balancer templates (haproxy/haproxy.cfg,
// nftables/balancer.nft). The files stay where operators read, copy and edit them; a tool
// given a path reads that file instead.
//
// Non-goals: reading or checking them (internal/cluster and internal/balancer do), and the
// production binaries: the supervisor finds its configuration by its own rules.
package configs

import _ "embed"

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
