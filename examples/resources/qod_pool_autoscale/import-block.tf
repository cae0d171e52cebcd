# Or with an import block; `terraform plan -generate-config-out=generated.tf`
# writes the resource block for you.
import {
  to = qod_pool_autoscale.bi
  id = "acme/acme_sales/bi"
}
