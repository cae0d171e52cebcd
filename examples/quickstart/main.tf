# The quickstart: declare the autoscale band of the pool acme/acme_sales/bi
# on a local control plane. The README walks through it; `make quickstart`
# runs it end to end. QOD_ENDPOINT and QOD_API_KEY configure the provider.
terraform {
  required_providers {
    qod = {
      source = "terraform.local/qodaperio/qod"
    }
  }
}

provider "qod" {}

resource "qod_pool_autoscale" "bi" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "bi"
  min_nodes = 2
  max_nodes = 6
}

data "qod_pool" "bi" {
  tenant    = qod_pool_autoscale.bi.tenant
  tenant_db = qod_pool_autoscale.bi.tenant_db
  pool      = qod_pool_autoscale.bi.pool
}

output "pool" {
  value = {
    id        = data.qod_pool.bi.id
    size      = data.qod_pool.bi.size
    band      = [data.qod_pool.bi.min_nodes, data.qod_pool.bi.max_nodes]
    writeonly = data.qod_pool.bi.writeonly
    readonly  = data.qod_pool.bi.readonly
    autoscale = data.qod_pool.bi.autoscale.rule
  }
}
