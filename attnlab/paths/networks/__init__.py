"""The networks of the attention-paths study: the deep multi-head attention network and its paths
(`architecture`, spec §3) and the path kernels and path Gram tensor (`kernels`, spec §4). Nothing here imports the
rest of `paths`."""
