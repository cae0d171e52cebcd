package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var _ datasource.DataSourceWithConfigure = (*poolsDataSource)(nil)

// NewPoolsDataSource is the qod_pools data source.
func NewPoolsDataSource() datasource.DataSource { return &poolsDataSource{} }

type poolsDataSource struct {
	data *qodData
}

type poolsModel struct {
	Tenant types.String `tfsdk:"tenant"`
	Pools  []poolModel  `tfsdk:"pools"`
}

func (d *poolsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pools"
}

func (d *poolsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists QoD pools, all that the key may see or one tenant's, ordered by id.",
		Attributes: map[string]schema.Attribute{
			"tenant": schema.StringAttribute{
				Optional:            true,
				MarkdownDescription: "Only this tenant's pools. An org-scoped key sees its own tenant's pools either way.",
				Validators:          []validator.String{poolNameValidator{}},
			},
			"pools": schema.ListNestedAttribute{
				Computed:            true,
				MarkdownDescription: "The pools.",
				NestedObject:        schema.NestedAttributeObject{Attributes: poolAttributes()},
			},
		},
	}
}

func (d *poolsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, err := qodDataFrom(req.ProviderData)
	if err != nil {
		resp.Diagnostics.AddError("Provider misconfigured", err.Error())
		return
	}
	d.data = data
}

func (d *poolsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m poolsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	pools, err := d.data.client.ListPools(ctx, m.Tenant.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Cannot list pools", err.Error())
		return
	}
	m.Pools = make([]poolModel, 0, len(pools))
	for i := range pools {
		m.Pools = append(m.Pools, poolModelOf(&pools[i]))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
