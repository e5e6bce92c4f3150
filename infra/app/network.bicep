// The optional virtual network (vnetEnabled): the Flex Consumption app's subnet, delegated to
// Microsoft.App/environments, and private endpoints with private DNS zones for the storage
// account (blob; queue and table too with the Azure Storage Durable backend), the Service Bus
// namespace (Premium) and the Cosmos DB account, whose public network access is then off.
param vnetName string
param endpointPrefix string
param location string
param tags object
param storageAccountId string
param durableOnStorage bool = false
param serviceBusNamespaceId string
param cosmosAccountId string

var storageSuffix = environment().suffixes.storage
var blobEndpoint = [
  {
    name: 'blob'
    resourceId: storageAccountId
    groupId: 'blob'
    zone: 'privatelink.blob.${storageSuffix}'
  }
]
var durableStorageEndpoints = durableOnStorage ? [
  {
    name: 'queue'
    resourceId: storageAccountId
    groupId: 'queue'
    zone: 'privatelink.queue.${storageSuffix}'
  }
  {
    name: 'table'
    resourceId: storageAccountId
    groupId: 'table'
    zone: 'privatelink.table.${storageSuffix}'
  }
] : []
var messagingEndpoints = [
  {
    name: 'servicebus'
    resourceId: serviceBusNamespaceId
    groupId: 'namespace'
    zone: 'privatelink.servicebus.windows.net'
  }
  {
    name: 'cosmos'
    resourceId: cosmosAccountId
    groupId: 'Sql'
    zone: 'privatelink.documents.azure.com'
  }
]
var endpoints = concat(blobEndpoint, durableStorageEndpoints, messagingEndpoints)

resource vnet 'Microsoft.Network/virtualNetworks@2024-05-01' = {
  name: vnetName
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        '10.0.0.0/16'
      ]
    }
    subnets: [
      {
        name: 'app'
        properties: {
          addressPrefix: '10.0.1.0/24'
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
          privateEndpointNetworkPolicies: 'Disabled'
          privateLinkServiceNetworkPolicies: 'Enabled'
        }
      }
      {
        name: 'private-endpoints'
        properties: {
          addressPrefix: '10.0.2.0/24'
          privateEndpointNetworkPolicies: 'Disabled'
          privateLinkServiceNetworkPolicies: 'Enabled'
        }
      }
    ]
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2020-06-01' = [
  for endpoint in endpoints: {
    name: endpoint.zone
    location: 'global'
    tags: tags
  }
]

resource zoneLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = [
  for (endpoint, i) in endpoints: {
    parent: zones[i]
    name: vnetName
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: vnet.id
      }
    }
  }
]

resource privateEndpoints 'Microsoft.Network/privateEndpoints@2024-05-01' = [
  for endpoint in endpoints: {
    name: '${endpointPrefix}-${endpoint.name}'
    location: location
    tags: tags
    properties: {
      subnet: {
        id: '${vnet.id}/subnets/private-endpoints'
      }
      privateLinkServiceConnections: [
        {
          name: endpoint.name
          properties: {
            privateLinkServiceId: endpoint.resourceId
            groupIds: [
              endpoint.groupId
            ]
          }
        }
      ]
    }
  }
]

resource zoneGroups 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2024-05-01' = [
  for (endpoint, i) in endpoints: {
    parent: privateEndpoints[i]
    name: 'default'
    properties: {
      privateDnsZoneConfigs: [
        {
          name: endpoint.name
          properties: {
            privateDnsZoneId: zones[i].id
          }
        }
      ]
    }
  }
]

output appSubnetId string = '${vnet.id}/subnets/app'
