"""The networks of the attention-paths study: the deep multi-head attention network and its paths
(`architecture`, spec §3), the path kernels and path Gram tensor (`kernels`, spec §4), and the gradient-descent
network with trainable query/key heads (`gradient_descent`, spec §9.3). Nothing here imports the rest of `paths`."""
