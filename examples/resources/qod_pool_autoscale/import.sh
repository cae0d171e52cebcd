# Import the band of an existing pool by its id, tenant/tenant_db/pool.
terraform import qod_pool_autoscale.bi acme/acme_sales/bi
