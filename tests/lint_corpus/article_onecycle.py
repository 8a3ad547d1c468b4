scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=0.01, total_steps=len(data_loader)*epochs
)
for epoch in range(epochs):
    for inputs, labels in data_loader:
        # 训练步骤...
        scheduler.step()  # 更新学习率
