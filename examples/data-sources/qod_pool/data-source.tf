data "qod_pool" "bi" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "bi"
}

output "bi_size" {
  value = "${data.qod_pool.bi.size} nodes, band [${data.qod_pool.bi.min_nodes}, ${data.qod_pool.bi.max_nodes}]"
}

# Why the pool is the size it is: the rule behind the last sweep's decision,
# e.g. "in out cooldown: 42 s left" or "at maxNodes 6".
output "bi_autoscale" {
  value = "${data.qod_pool.bi.autoscale.decision}: ${data.qod_pool.bi.autoscale.rule}"
}
