// Package node gives a luft daemon its identity as a node of a shared store and keeps its
// lease.
//
// A node's id is stable: the host's name and an id kept in the state dir (node.id, made
// on first use), so a daemon restarted on the same state dir is the same node, and two
// state dirs on one host are two nodes. The id is recorded as the owner of every run the
// node drives (storage.Run.Node).
//
// A Keeper renews the node's lease: every heartbeat it records the node (storage's nodes
// table: address, pid, heartbeat) and extends, on the run rows, the lease of every run
// the node drives at the attempt it drives it. It does so on a store of its own (its own
// connection), so renewals never queue behind the node's journal writes. Runs that a
// renewal finds claimed by another node are reported lost, and the runtime stops them at
// once. Valid is the self-fence: false once the last successful renewal + the lease's
// length - a margin has passed by this process's monotonic clock.
package node
