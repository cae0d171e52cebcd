# A BI pool with one writer: one reader when quiet, up to five at peak.
# The pool must already exist (POST /api/pool/create); this declares its band.
resource "qod_pool_autoscale" "bi" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "bi"
  min_nodes = 2
  max_nodes = 6
}

# min_nodes == max_nodes pins a pool: the autoscaler never moves it and
# manual scaling is held to that one size.
resource "qod_pool_autoscale" "ledger" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "ledger"
  min_nodes = 3
  max_nodes = 3
}
