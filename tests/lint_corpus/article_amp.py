scaler = torch.cuda.amp.GradScaler()
for data, target in data_loader:
    optimizer.zero_grad()
    with torch.cuda.amp.autocast():  # 自动选择FP16/FP32
        output = model(data)
        loss = criterion(output, target)
    scaler.scale(loss).backward()  # 缩放梯度防止溢出
    scaler.step(optimizer)         # 更新参数
    scaler.update()                # 调整缩放因子
