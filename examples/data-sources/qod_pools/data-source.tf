data "qod_pools" "acme" {
  tenant = "acme"
}

# The pools of acme that have no band yet.
output "fixed_size_pools" {
  value = [for p in data.qod_pools.acme.pools : p.id if !p.elastic]
}
