data "qod_pool" "bi" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "bi"
}

output "bi_size" {
  value = "${data.qod_pool.bi.size} nodes, band [${data.qod_pool.bi.min_nodes}, ${data.qod_pool.bi.max_nodes}]"
}
