"""Example fedsheaf plug-ins (docs/extending.md walks through each).

Every module is loaded only when a config names its plug-in: fedsheaf imports the entry
point's module in each rank process, so importing this package stays cheap.

=======================  ======================  ==========================================
entry-point group        name                    callable (in fedsheaf_example)
=======================  ======================  ==========================================
fedsheaf.datasets        example_tabular         data.load_tabular
fedsheaf.models          example_mlp             models.build_agent_mlp
fedsheaf.server_models   example_server_mlp      models.build_server_mlp
fedsheaf.partitions      example_sorted_chunks   partition.sorted_chunks
fedsheaf.aggregators     example_clipped_mean    aggregator.ClippedMean
fedsheaf.algorithms      example_smooth_noncoop  algorithm.SmoothedNonCooperative
=======================  ======================  ==========================================
"""

__version__ = "0.1.0"
